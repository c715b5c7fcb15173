//! Property tests of what the agent decodes from outside the process: extenders' JSON
//! answers and kubeconfig files. Any input yields a value or an error, never a panic.

use mcsched_agent::scheduler::extender::{AnswerError, decode_filter, decode_priorities};
use proptest::prelude::*;
use serde_json::{Value, json};

/// JSON values, shaped like extender answers often enough to reach every branch.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        ".{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
            prop::collection::btree_map(
                prop_oneof![
                    Just("Error".to_string()),
                    Just("NodeNames".to_string()),
                    Just("nodes".to_string()),
                    Just("items".to_string()),
                    Just("metadata".to_string()),
                    Just("name".to_string()),
                    Just("FailedNodes".to_string()),
                    Just("FailedAndUnresolvableNodes".to_string()),
                    Just("Host".to_string()),
                    Just("score".to_string()),
                    ".{0,8}",
                ],
                inner,
                0..6,
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn extender_filter_answers_decode_or_fail(answer in json_value(), cache in any::<bool>()) {
        let text = answer.to_string();
        match decode_filter(&answer, cache) {
            // Every node named comes from the answer itself.
            Ok(r) => {
                for n in r.nodes.iter().chain(r.failed.keys()) {
                    let quoted = serde_json::to_string(n).expect("a string serializes");
                    prop_assert!(text.contains(&quoted), "{} not in {}", quoted, text);
                }
            }
            // An error is the extender's own Error field, which is a non-empty string.
            Err(AnswerError::Reported(e)) => prop_assert!(!e.is_empty() && text.contains(&serde_json::to_string(&e).expect("a string serializes"))),
            Err(e) => prop_assert!(false, "a filter answer fails only with its own Error: {}", e),
        }
    }

    #[test]
    fn extender_priorities_decode_or_fail(answer in json_value()) {
        match decode_priorities(&answer) {
            Ok(scores) => prop_assert!(answer.is_array() || scores.is_empty()),
            Err(e) => prop_assert!(e == AnswerError::NotAList && !answer.is_array()),
        }
    }

    #[test]
    fn kubeconfig_files_load_or_fail(text in ".{0,300}") {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("kubeconfig");
        std::fs::write(&path, &text).expect("write");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        // Loading parses and builds a client; nothing is sent.
        let _ = rt.block_on(mcsched_agent::control::client::connect(Some(&path), None, 5.0, 10));
    }
}
