//! Lists and watches in protobuf.
