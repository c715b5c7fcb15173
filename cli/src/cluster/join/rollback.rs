//! What a join run created, undone in reverse order when a later step fails.

use super::*;

/// Objects this run created (not ones that existed before), undone in reverse order.
pub(super) type Undo = Box<dyn FnOnce(Client) -> futures::future::BoxFuture<'static, ()> + Send>;

pub(super) enum Created {
    Leaf(Undo),
    Host(Undo),
}

pub(super) struct Rollback {
    pub(super) host: Client,
    pub(super) leaf: Client,
    pub(super) created: Vec<(String, Created)>,
}

impl Rollback {
    pub(super) fn push(&mut self, in_leaf: bool, what: String, undo: Undo) {
        let what = format!("{} {what}", if in_leaf { "leaf" } else { "host" });
        let c = if in_leaf {
            Created::Leaf(undo)
        } else {
            Created::Host(undo)
        };
        self.created.push((what, c));
    }

    pub(super) fn record_cluster<K>(&mut self, in_leaf: bool, name: String)
    where
        K: Resource<DynamicType = (), Scope = kube::core::ClusterResourceScope>
            + Clone
            + DeserializeOwned
            + Debug
            + Send
            + 'static,
    {
        let what = format!("{} {name}", K::kind(&()));
        self.push(
            in_leaf,
            what,
            Box::new(
                move |client: Client| -> futures::future::BoxFuture<'static, ()> {
                    Box::pin(async move {
                        let _ = Api::<K>::all(client)
                            .delete(&name, &DeleteParams::default())
                            .await;
                    })
                },
            ),
        );
    }

    pub(super) fn record_namespaced<K>(&mut self, in_leaf: bool, ns: String, name: String)
    where
        K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + Debug
            + Send
            + 'static,
    {
        let what = format!("{} {ns}/{name}", K::kind(&()));
        self.push(
            in_leaf,
            what,
            Box::new(
                move |client: Client| -> futures::future::BoxFuture<'static, ()> {
                    Box::pin(async move {
                        let _ = Api::<K>::namespaced(client, &ns)
                            .delete(&name, &DeleteParams::default())
                            .await;
                    })
                },
            ),
        );
    }

    pub(super) async fn undo(self) {
        for (what, c) in self.created.into_iter().rev() {
            match c {
                Created::Leaf(f) => f(self.leaf.clone()).await,
                Created::Host(f) => f(self.host.clone()).await,
            }
            warn(&format!("rolled back: removed {what}"));
        }
    }
}
