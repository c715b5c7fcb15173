//! ImageLocality: prefers nodes that already hold the pod's images, weighted by image size
//! and by how widely the image is spread (to avoid piling pods onto one node).

use std::collections::HashMap;
use std::sync::Arc;

use crate::framework::{CycleState, MAX_NODE_SCORE, Plugin, PreScorePlugin, ScorePlugin, Status};
use crate::snapshot::{NodeInfo, PodInfo, Snapshot};

pub(crate) const NAME: &str = "ImageLocality";
const MB: i64 = 1024 * 1024;
const MIN_THRESHOLD: i64 = 23 * MB;
const MAX_CONTAINER_THRESHOLD: i64 = 1000 * MB;

pub(crate) struct ImageLocality;

#[derive(Clone)]
struct Spread {
    total_nodes: usize,
    image_nodes: Arc<HashMap<String, usize>>,
    /// The pod's images, normalised once per cycle.
    images: Vec<String>,
}

/// `nginx` and `nginx:latest` are one image; a digest or tag is kept as given.
pub(crate) fn normalized_image_name(image: &str) -> String {
    let last = image.rsplit('/').next().unwrap_or(image);
    if last.contains(':') || last.contains('@') {
        image.to_string()
    } else {
        format!("{image}:latest")
    }
}

fn images(pod: &PodInfo) -> Vec<String> {
    pod.object()
        .spec
        .as_ref()
        .map(|s| {
            s.init_containers
                .iter()
                .flatten()
                .chain(&s.containers)
                .filter_map(|c| c.image.as_deref())
                .map(normalized_image_name)
                .collect()
        })
        .unwrap_or_default()
}

impl Plugin for ImageLocality {
    fn name(&self) -> &'static str {
        NAME
    }
    fn as_pre_score(&self) -> Option<&dyn PreScorePlugin> {
        Some(self)
    }
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
}

impl PreScorePlugin for ImageLocality {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _nodes: &crate::snapshot::NodeList,
        snapshot: &Snapshot,
    ) -> Status {
        state.write(
            NAME,
            Spread {
                total_nodes: snapshot.len(),
                image_nodes: snapshot.image_nodes.clone(),
                images: images(pod),
            },
        );
        Status::success()
    }
}

impl ScorePlugin for ImageLocality {
    fn score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let Some(spread) = state.read::<Spread>(NAME) else {
            return Ok(0);
        };
        let imgs = &spread.images;
        // A node without images scores the minimum, 0, as the sum below would.
        if imgs.is_empty() || spread.total_nodes == 0 || node.images.is_empty() {
            return Ok(0);
        }
        let sum: i64 = imgs
            .iter()
            .filter_map(|i| {
                let size = *node.images.get(i)?;
                let on = spread.image_nodes.get(i).copied().unwrap_or(1);
                Some((size as f64 * on as f64 / spread.total_nodes as f64) as i64)
            })
            .sum();
        let max = MAX_CONTAINER_THRESHOLD * imgs.len() as i64;
        let clamped = sum.clamp(MIN_THRESHOLD, max);
        Ok(MAX_NODE_SCORE * (clamped - MIN_THRESHOLD) / (max - MIN_THRESHOLD))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testing::{node_with, pod_with};
    use k8s_openapi::api::core::v1::ContainerImage;

    #[test]
    fn image_names() {
        assert_eq!(normalized_image_name("nginx"), "nginx:latest");
        assert_eq!(normalized_image_name("nginx:1.25"), "nginx:1.25");
        assert_eq!(
            normalized_image_name("localhost:5000/app"),
            "localhost:5000/app:latest"
        );
        assert_eq!(normalized_image_name("app@sha256:abc"), "app@sha256:abc");
    }

    #[test]
    fn big_local_images_score_high() {
        let with_image = node_with("a", |n| {
            n.status.get_or_insert_default().images = Some(vec![ContainerImage {
                names: Some(vec!["big:1".into()]),
                size_bytes: Some(500 * MB),
            }]);
        });
        let without = node_with("b", |_| {});
        let snapshot = Snapshot::from_nodes(vec![
            Arc::new(with_image.clone()),
            Arc::new(without.clone()),
        ]);
        let pod = pod_with(|p| {
            if let Some(s) = p.spec.as_mut() {
                s.containers[0].image = Some("big:1".into());
            }
        });
        let mut state = CycleState::new();
        ImageLocality.pre_score(&mut state, &pod, &Default::default(), &snapshot);
        // 500 MB on 1 of 2 nodes → 250 MB; (250 − 23) · 100 / (1000 − 23) = 23.
        assert_eq!(ImageLocality.score(&state, &pod, &with_image), Ok(23));
        assert_eq!(ImageLocality.score(&state, &pod, &without), Ok(0));
    }
}
