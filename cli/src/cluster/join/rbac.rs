//! The rights join grants: the leaf account's writes in the granted namespaces, and the
//! agent's on its virtual node, Lease and join Secret.

use super::*;

/// The leaf account's write rights: a RoleBinding of [`keys::LEAF_WRITER_ROLE`] in each
/// granted namespace (created, marked as this host's, when missing), or with
/// `--all-namespaces` a ClusterRoleBinding of [`keys::LEAF_CLUSTER_WRITER_ROLE`] (no
/// Secret read) and a RoleBinding of the writer role (Secrets read) in every namespace
/// there now but the protected ones, where the namespace policy refuses every write.
pub(super) async fn grant_writes(
    p: &Plan<'_>,
    leaf: &Client,
    rb: &mut Rollback,
) -> anyhow::Result<()> {
    match &p.grant {
        Grant::Namespaces(list) => {
            let namespaces: Api<Namespace> = Api::all(leaf.clone());
            let mut created = Vec::new();
            for ns in list {
                match namespaces.get_opt(ns).await? {
                    None => {
                        namespaces
                            .create(
                                &PostParams::default(),
                                &leaf_access::granted_namespace(
                                    ns,
                                    &p.host_id,
                                    &p.args.name,
                                    p.args.pod_security,
                                ),
                            )
                            .await
                            .with_context(|| format!("creating leaf namespace {ns}"))?;
                        rb.record_cluster::<Namespace>(true, ns.clone());
                        created.push(ns.as_str());
                    }
                    Some(existing) => pod_security_of(p, &namespaces, &existing, rb).await?,
                }
                let api: Api<RoleBinding> = Api::namespaced(leaf.clone(), ns);
                let binding = leaf_access::writer_binding(ns, &p.host_id);
                if put_grant(&api, &binding, &binding.role_ref, &p.host_id).await? {
                    rb.record_namespaced::<RoleBinding>(
                        true,
                        ns.clone(),
                        keys::LEAF_ACCOUNT.into(),
                    );
                }
                if p.args.service_accounts {
                    let binding = leaf_access::service_account_binding(ns, &p.host_id);
                    if put_grant(&api, &binding, &binding.role_ref, &p.host_id).await? {
                        rb.record_namespaced::<RoleBinding>(
                            true,
                            ns.clone(),
                            keys::LEAF_SERVICE_ACCOUNT_ROLE.into(),
                        );
                    }
                }
            }
            let created = if created.is_empty() {
                String::new()
            } else {
                format!(
                    "; created {} with Pod Security {}",
                    created.join(", "),
                    p.args.pod_security.as_str()
                )
            };
            step(&format!(
                "leaf: {} may write in namespace(s) {} only (RoleBinding {} to ClusterRole {}{created})",
                keys::LEAF_ACCOUNT,
                list.join(", "),
                keys::LEAF_ACCOUNT,
                keys::LEAF_WRITER_ROLE
            ));
        }
        Grant::AllNamespaces => {
            warn(&format!(
                "--all-namespaces: the host may create pods and write Secrets in every namespace of the leaf but {} (an admission policy refuses those), and so act as any ServiceAccount there; name the namespaces with --namespaces unless the host is trusted as much as the leaf's admins",
                keys::LEAF_PROTECTED_NAMESPACES.join(", ")
            ));
            let api: Api<ClusterRoleBinding> = Api::all(leaf.clone());
            let binding = leaf_access::writer_cluster_binding(&p.host_id);
            if put_grant(&api, &binding, &binding.role_ref, &p.host_id).await? {
                rb.record_cluster::<ClusterRoleBinding>(
                    true,
                    keys::LEAF_CLUSTER_WRITER_ROLE.into(),
                );
            }
            // Secrets are read by RoleBindings, never cluster-wide: in each namespace
            // there now (a namespace made later gets one when join runs again).
            for ns in readable_namespaces(leaf).await? {
                let api: Api<RoleBinding> = Api::namespaced(leaf.clone(), &ns);
                let binding = leaf_access::writer_binding(&ns, &p.host_id);
                if let Some(b) = api.get_opt(keys::LEAF_ACCOUNT).await?
                    && !(is_managed(&b.metadata) && b.role_ref == binding.role_ref)
                {
                    warn(&format!(
                        "leaf namespace {ns} has a RoleBinding {} that is not mcsched's: left as it is, and Secrets there are not read",
                        keys::LEAF_ACCOUNT
                    ));
                    continue;
                }
                if put_grant(&api, &binding, &binding.role_ref, &p.host_id).await? {
                    rb.record_namespaced::<RoleBinding>(true, ns, keys::LEAF_ACCOUNT.into());
                }
            }
            step(&format!(
                "leaf: {} may write in every namespace but {} (ClusterRoleBinding {}; Secrets read only in the namespaces there now, by RoleBindings {})",
                keys::LEAF_ACCOUNT,
                keys::LEAF_PROTECTED_NAMESPACES.join(", "),
                keys::LEAF_CLUSTER_WRITER_ROLE,
                keys::LEAF_ACCOUNT
            ));
            if p.args.service_accounts {
                let binding = leaf_access::service_account_cluster_binding(&p.host_id);
                if put_grant(&api, &binding, &binding.role_ref, &p.host_id).await? {
                    rb.record_cluster::<ClusterRoleBinding>(
                        true,
                        keys::LEAF_SERVICE_ACCOUNT_ROLE.into(),
                    );
                }
            }
        }
    }
    if p.args.service_accounts {
        step(&format!(
            "leaf: {} may create the ServiceAccounts the host's pods name where it may write (ClusterRole {}; no RBAC goes with them)",
            keys::LEAF_ACCOUNT,
            keys::LEAF_SERVICE_ACCOUNT_ROLE
        ));
    }
    Ok(())
}

/// A granted namespace that exists: one this host's join created for this leaf gets the
/// Pod Security level asked for; another is the leaf's own, whose labels are left as
/// they are (and are what the leaf enforces, and the agent judges copies by).
pub(super) async fn pod_security_of(
    p: &Plan<'_>,
    namespaces: &Api<Namespace>,
    existing: &Namespace,
    rb: &mut Rollback,
) -> anyhow::Result<()> {
    let ns = existing.name_any();
    let labels = existing.labels();
    let ours = is_managed(&existing.metadata)
        && labels.get(keys::HOST_ID_LABEL) == Some(&p.host_id)
        && labels.get(keys::MANAGED_CLUSTER_LABEL) == Some(&p.args.name);
    if !ours {
        let level = labels
            .get(keys::POD_SECURITY_ENFORCE_LABEL)
            .map_or("none: the leaf's default", String::as_str);
        step(&format!(
            "leaf: namespace {ns} is not one join created: its Pod Security labels stay as they are (enforce: {level})"
        ));
        return Ok(());
    }
    let wanted = leaf_access::pod_security_labels(p.args.pod_security);
    if wanted.iter().all(|(k, v)| labels.get(k) == Some(v)) {
        return Ok(());
    }
    namespaces
        .patch(
            &ns,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": wanted}})),
        )
        .await
        .with_context(|| format!("labelling leaf namespace {ns} with its Pod Security level"))?;
    // Undone with the rest if a later step fails: the labels as they were.
    let before: serde_json::Map<String, serde_json::Value> = wanted
        .keys()
        .map(|k| (k.clone(), labels.get(k).cloned().into()))
        .collect();
    rb.push(
        true,
        format!("Pod Security relabelling of Namespace {ns}"),
        Box::new(
            move |client: Client| -> futures::future::BoxFuture<'static, ()> {
                Box::pin(async move {
                    let _ = Api::<Namespace>::all(client)
                        .patch(
                            &ns,
                            &PatchParams::default(),
                            &Patch::Merge(json!({"metadata": {"labels": before}})),
                        )
                        .await;
                })
            },
        ),
    );
    step(&format!(
        "leaf: namespace {} now enforces Pod Security {}",
        existing.name_any(),
        p.args.pod_security.as_str()
    ));
    Ok(())
}

/// Creates a grant binding, or keeps the one there: this host's is re-applied, another
/// host's (the same grant of the same account) is left as it is. A binding of that name
/// that is not mcsched's, or binds another role, is refused. True when created.
pub(super) async fn put_grant<K>(
    api: &Api<K>,
    binding: &K,
    role: &RoleRef,
    host_id: &str,
) -> anyhow::Result<bool>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Serialize + Debug + HasRoleRef,
{
    let name = binding.meta().name.clone().unwrap_or_default();
    let Some(existing) = api.get_opt(&name).await? else {
        api.create(&PostParams::default(), binding)
            .await
            .with_context(|| format!("creating leaf {}", describe::<K>(binding.meta())))?;
        return Ok(true);
    };
    if !is_managed(existing.meta()) || existing.role_ref() != role {
        bail!(
            "{} exists in the leaf and is not mcsched's grant (label {}={}, role {} {}): join does not take it over; remove or rename it",
            describe::<K>(existing.meta()),
            keys::MANAGED_BY_LABEL,
            keys::MANAGED_BY_VALUE,
            role.kind,
            role.name
        );
    }
    let owner = existing
        .meta()
        .labels
        .as_ref()
        .and_then(|l| l.get(keys::HOST_ID_LABEL));
    if owner.is_some_and(|o| o == host_id) {
        apply(api, binding)
            .await
            .with_context(|| format!("writing leaf {}", describe::<K>(binding.meta())))?;
    }
    Ok(false)
}

/// The leaf's namespaces that `--all-namespaces` grants Secrets read in: all there now
/// but the protected ones and those on their way out.
pub(super) async fn readable_namespaces(leaf: &Client) -> anyhow::Result<Vec<String>> {
    let list = Api::<Namespace>::all(leaf.clone())
        .list(&ListParams::default())
        .await
        .context("listing the leaf's namespaces")?;
    Ok(list
        .items
        .into_iter()
        .filter(|n| n.metadata.deletion_timestamp.is_none())
        .map(|n| n.name_any())
        .filter(|n| !keys::is_protected_leaf_namespace(n))
        .collect())
}

/// RoleBinding and ClusterRoleBinding alike.
pub(super) trait HasRoleRef {
    fn role_ref(&self) -> &RoleRef;
}

impl HasRoleRef for RoleBinding {
    fn role_ref(&self) -> &RoleRef {
        &self.role_ref
    }
}

impl HasRoleRef for ClusterRoleBinding {
    fn role_ref(&self) -> &RoleRef {
        &self.role_ref
    }
}

/// Removes this host's grants that the run no longer asks for: RoleBindings in
/// namespaces not listed, or the all-namespaces binding when namespaces are listed. The
/// namespaces themselves and what runs there stay.
pub(super) async fn remove_stale_grants(p: &Plan<'_>, leaf: &Client) -> anyhow::Result<()> {
    let ours = format!(
        "{}={},{}={}",
        keys::MANAGED_BY_LABEL,
        keys::MANAGED_BY_VALUE,
        keys::HOST_ID_LABEL,
        p.host_id
    );
    let keep: Vec<String> = match &p.grant {
        Grant::Namespaces(list) => list.clone(),
        Grant::AllNamespaces => readable_namespaces(leaf).await?,
    };
    let all = matches!(p.grant, Grant::AllNamespaces);
    let bindings = Api::<RoleBinding>::all(leaf.clone())
        .list(&ListParams::default().labels(&ours))
        .await
        .context("listing this host's grants in the leaf")?;
    for b in bindings.items {
        let ns = b.namespace().unwrap_or_default();
        let writes =
            b.name_any() == keys::LEAF_ACCOUNT && b.role_ref.name == keys::LEAF_WRITER_ROLE;
        let accounts = b.name_any() == keys::LEAF_SERVICE_ACCOUNT_ROLE
            && b.role_ref.name == keys::LEAF_SERVICE_ACCOUNT_ROLE;
        // With --all-namespaces the per-namespace grant is the writer's only (Secrets
        // read); the ServiceAccount grant is cluster-wide.
        let wanted = keep.contains(&ns) && (writes || (p.args.service_accounts && !all));
        if !(writes || accounts) || wanted {
            continue;
        }
        delete_exactly(&Api::<RoleBinding>::namespaced(leaf.clone(), &ns), &b)
            .await
            .with_context(|| format!("removing the grant in leaf namespace {ns}"))?;
        step(&format!(
            "leaf: {} in namespace {ns} removed (RoleBinding {ns}/{}); the namespace and what runs there stay",
            if writes {
                "grant"
            } else {
                "ServiceAccount grant"
            },
            b.name_any()
        ));
    }
    let api: Api<ClusterRoleBinding> = Api::all(leaf.clone());
    for (name, wanted, what) in [
        (
            keys::LEAF_CLUSTER_WRITER_ROLE,
            all,
            "the all-namespaces grant",
        ),
        // Joins before the split bound the writer role, Secrets read included, here.
        (
            keys::LEAF_WRITER_ROLE,
            false,
            "the all-namespaces grant of an earlier join",
        ),
        (
            keys::LEAF_SERVICE_ACCOUNT_ROLE,
            all && p.args.service_accounts,
            "the all-namespaces ServiceAccount grant",
        ),
    ] {
        if wanted {
            continue;
        }
        if let Some(b) = api.get_opt(name).await?
            && b.labels().get(keys::HOST_ID_LABEL) == Some(&p.host_id)
            && is_managed(&b.metadata)
        {
            delete_exactly(&api, &b)
                .await
                .with_context(|| format!("removing {what} in the leaf"))?;
            step(&format!("leaf: {what} removed (ClusterRoleBinding {name})"));
        }
    }
    Ok(())
}

impl Rollback {
    pub(super) fn record_host_rbac(&mut self, kind: RbacKind, node: &str, namespace: &str) {
        let name = rbac_name(node);
        match kind {
            RbacKind::ClusterRole => self.record_cluster::<ClusterRole>(false, name),
            RbacKind::ClusterRoleBinding => self.record_cluster::<ClusterRoleBinding>(false, name),
            RbacKind::LeaseRole => {
                self.record_namespaced::<Role>(false, NODE_LEASE_NS.into(), name)
            }
            RbacKind::LeaseRoleBinding => {
                self.record_namespaced::<RoleBinding>(false, NODE_LEASE_NS.into(), name)
            }
            RbacKind::SecretRole => self.record_namespaced::<Role>(false, namespace.into(), name),
            RbacKind::SecretRoleBinding => {
                self.record_namespaced::<RoleBinding>(false, namespace.into(), name)
            }
        }
    }
}

pub const NODE_LEASE_NS: &str = "kube-node-lease";

#[derive(Clone, Copy)]
pub enum RbacKind {
    ClusterRole,
    ClusterRoleBinding,
    /// In `kube-node-lease`: the virtual node's Lease.
    LeaseRole,
    LeaseRoleBinding,
    /// In the agent's namespace: the join Secret, where the agent writes renewed tokens.
    SecretRole,
    SecretRoleBinding,
}

/// `mcsched-virtual-node-<cluster>`, from the node name `mcsched-<cluster>`.
pub fn rbac_name(node: &str) -> String {
    let cluster = node.strip_prefix(keys::VIRTUAL_NODE_PREFIX).unwrap_or(node);
    format!("{}{cluster}", keys::VIRTUAL_NODE_RBAC_PREFIX)
}

/// What the agent may do with this virtual node, its Lease and its join Secret, and
/// nothing else.
pub(super) async fn agent_rbac(
    host: &Client,
    namespace: &str,
    node: &str,
    secret: &str,
) -> anyhow::Result<Vec<(bool, RbacKind)>> {
    let name = rbac_name(node);
    let meta = |ns: Option<&str>| ObjectMeta {
        name: Some(name.clone()),
        namespace: ns.map(String::from),
        labels: Some(managed_labels()),
        ..Default::default()
    };
    let only = |resources: &[&str], verbs: &[&str], group: &str, object: &str| PolicyRule {
        api_groups: Some(vec![group.to_string()]),
        resources: Some(resources.iter().map(|s| s.to_string()).collect()),
        resource_names: Some(vec![object.to_string()]),
        verbs: verbs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    };
    let subject = Subject {
        kind: "ServiceAccount".into(),
        name: keys::AGENT_NAME.into(),
        namespace: Some(namespace.into()),
        ..Default::default()
    };
    let role_ref = |kind: &str| RoleRef {
        api_group: Some("rbac.authorization.k8s.io".into()),
        kind: kind.into(),
        name: name.clone(),
    };
    let cr = ClusterRole {
        metadata: meta(None),
        rules: Some(vec![
            only(&["nodes"], &["get", "update", "patch", "delete"], "", node),
            only(&["nodes/status"], &["get", "update", "patch"], "", node),
        ]),
        ..Default::default()
    };
    let crb = ClusterRoleBinding {
        metadata: meta(None),
        role_ref: role_ref("ClusterRole"),
        subjects: Some(vec![subject.clone()]),
    };
    let lease_role = Role {
        metadata: meta(Some(NODE_LEASE_NS)),
        rules: Some(vec![only(
            &["leases"],
            &["get", "update", "patch", "delete"],
            "coordination.k8s.io",
            node,
        )]),
    };
    let lease_binding = RoleBinding {
        metadata: meta(Some(NODE_LEASE_NS)),
        role_ref: role_ref("Role"),
        subjects: Some(vec![subject.clone()]),
    };
    let secret_role = Role {
        metadata: meta(Some(namespace)),
        rules: Some(vec![only(
            &["secrets"],
            &["get", "patch", "update"],
            "",
            secret,
        )]),
    };
    let secret_binding = RoleBinding {
        metadata: meta(Some(namespace)),
        role_ref: role_ref("Role"),
        subjects: Some(vec![subject]),
    };
    let leases = Api::<Role>::namespaced(host.clone(), NODE_LEASE_NS);
    let lease_bindings = Api::<RoleBinding>::namespaced(host.clone(), NODE_LEASE_NS);
    let roles = Api::<Role>::namespaced(host.clone(), namespace);
    let bindings = Api::<RoleBinding>::namespaced(host.clone(), namespace);
    Ok(vec![
        (
            apply(&Api::all(host.clone()), &cr).await?,
            RbacKind::ClusterRole,
        ),
        (
            apply(&Api::all(host.clone()), &crb).await?,
            RbacKind::ClusterRoleBinding,
        ),
        (apply(&leases, &lease_role).await?, RbacKind::LeaseRole),
        (
            apply(&lease_bindings, &lease_binding).await?,
            RbacKind::LeaseRoleBinding,
        ),
        (apply(&roles, &secret_role).await?, RbacKind::SecretRole),
        (
            apply(&bindings, &secret_binding).await?,
            RbacKind::SecretRoleBinding,
        ),
    ])
}
