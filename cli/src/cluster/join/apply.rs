//! Applying and deleting join's objects: only ones marked as mcsched's are taken over or
//! deleted (unjoin uses these too).

use super::*;

/// Server-side applies `obj`; true when it did not exist before.
pub(super) async fn apply<K>(api: &Api<K>, obj: &K) -> Result<bool, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
{
    let name = obj.meta().name.clone().unwrap_or_default();
    let existed = api.get_opt(&name).await?.is_some();
    api.patch(
        &name,
        &PatchParams::apply(keys::FIELD_MANAGER).force(),
        &Patch::Apply(obj),
    )
    .await?;
    Ok(!existed)
}

/// Whether mcsched created the object (`app.kubernetes.io/managed-by=mcsched`).
pub fn is_managed(meta: &ObjectMeta) -> bool {
    meta.labels
        .as_ref()
        .and_then(|l| l.get(keys::MANAGED_BY_LABEL))
        .is_some_and(|v| v == keys::MANAGED_BY_VALUE)
}

pub(super) fn describe<K: Resource<DynamicType = ()>>(meta: &ObjectMeta) -> String {
    let name = meta.name.as_deref().unwrap_or_default();
    match meta.namespace.as_deref() {
        Some(ns) => format!("{} {ns}/{name}", K::kind(&())),
        None => format!("{} {name}", K::kind(&())),
    }
}

/// [`apply`] in the leaf, refusing to take over an object of the same name that mcsched
/// did not create: the leaf owner's objects are never changed.
pub(super) async fn apply_in_leaf<K>(api: &Api<K>, obj: &K) -> anyhow::Result<bool>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Serialize + Debug,
{
    let name = obj.meta().name.clone().unwrap_or_default();
    if let Some(existing) = api.get_opt(&name).await?
        && !is_managed(existing.meta())
    {
        bail!(
            "{} exists in the leaf and is not mcsched's (no label {}={}): join does not take it over; remove or rename it",
            describe::<K>(existing.meta()),
            keys::MANAGED_BY_LABEL,
            keys::MANAGED_BY_VALUE
        );
    }
    apply(api, obj)
        .await
        .with_context(|| format!("writing leaf {}", describe::<K>(obj.meta())))
}

/// Deletes exactly the object that was read (its UID as precondition), ignoring what is
/// already gone.
pub async fn delete_exactly<K>(api: &Api<K>, obj: &K) -> Result<bool, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            uid: obj.meta().uid.clone(),
            resource_version: None,
        }),
        ..Default::default()
    };
    match api.delete(&obj.name_any(), &dp).await {
        Ok(_) => Ok(true),
        Err(e) if code(&e) == Some(404) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Deletes, ignoring what is already gone; other failures are reported.
pub async fn delete_quietly<K>(api: &Api<K>, name: &str) -> Result<bool, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(true),
        Err(e) if code(&e) == Some(404) => Ok(false),
        Err(e) => Err(e),
    }
}
