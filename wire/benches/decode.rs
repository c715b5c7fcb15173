//! A pod and a node captured from a real API server, decoded from each encoding into
//! k8s-openapi's types, as the watches decode every event: JSON by serde_json, protobuf
//! straight by `Schema::decode` (with managedFields, and without them as the agent's
//! watches decode) and through the API server's JSON (`to_json`).
//! And a pod of 140k short labels (~1.4 MB, valid to the API server, which bounds labels'
//! lengths but not their number), the review's case against a search per map entry.
//! `cargo bench -p mcsched-wire`.

use criterion::{Criterion, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::{Node, Pod};
use mcsched_wire::codec;
use mcsched_wire::schema::{self, Options};
use serde::de::DeserializeOwned;
use std::hint::black_box;

fn data(name: &str) -> Vec<u8> {
    std::fs::read(format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"))).expect("fixture")
}

fn one<K: DeserializeOwned>(c: &mut Criterion, kind: &str, message: &str) {
    let json = data(&format!("{}.json", kind.to_lowercase()));
    let pb = data(&format!("{}.pb", kind.to_lowercase()));
    let raw = codec::decode(&pb).expect("envelope").raw;
    let opts = Options::default();
    let mut g = c.benchmark_group(kind);
    g.bench_function("json", |b| {
        b.iter(|| serde_json::from_slice::<K>(black_box(&json)).expect("json"))
    });
    g.bench_function("protobuf", |b| {
        b.iter(|| {
            schema::schema()
                .decode::<K>(message, black_box(&raw), opts)
                .expect("protobuf")
        })
    });
    let lean = Options {
        skip_managed_fields: true,
    };
    g.bench_function("protobuf without managedFields", |b| {
        b.iter(|| {
            schema::schema()
                .decode::<K>(message, black_box(&raw), lean)
                .expect("protobuf")
        })
    });
    g.bench_function("protobuf via JSON value", |b| {
        b.iter(|| {
            let v = schema::schema()
                .to_json(message, black_box(&raw), opts)
                .expect("protobuf");
            serde_json::from_value::<K>(v).expect("object")
        })
    });
    g.finish();
}

fn labels(c: &mut Criterion) {
    use k8s_pb::api::core::v1 as pb;
    use k8s_pb::apimachinery::pkg::apis::meta::v1 as pbmeta;
    use prost::Message;
    const ALPHABET: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    let a = ALPHABET.len();
    let key = |i: usize| {
        String::from_utf8_lossy(&[ALPHABET[i / (a * a)], ALPHABET[i / a % a], ALPHABET[i % a]])
            .into_owned()
    };
    let pod = pb::Pod {
        metadata: Some(pbmeta::ObjectMeta {
            name: Some("labelled".into()),
            labels: (0..140_000).map(|i| (key(i), "v".to_string())).collect(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let raw = pod.encode_to_vec();
    let lean = Options {
        skip_managed_fields: true,
    };
    let mut g = c.benchmark_group("Pod of 140k labels");
    g.sample_size(10);
    g.bench_function("protobuf", |b| {
        b.iter(|| {
            schema::schema()
                .decode::<Pod>("k8s.io.api.core.v1.Pod", black_box(&raw), lean)
                .expect("protobuf")
        })
    });
    g.finish();
}

fn decode(c: &mut Criterion) {
    one::<Pod>(c, "Pod", "k8s.io.api.core.v1.Pod");
    one::<Node>(c, "Node", "k8s.io.api.core.v1.Node");
    labels(c);
}

criterion_group!(benches, decode);
criterion_main!(benches);
