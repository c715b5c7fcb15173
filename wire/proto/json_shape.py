#!/usr/bin/env python3
"""Writes json_shape.txt, what the .proto files do not say of the JSON, from the Go types:
`keep package.Message.jsonName`: a scalar whose zero value the API server's JSON keeps (a
Go pointer, or no `omitempty`; protobuf writes every non-pointer scalar, zero or not,
and the decoder drops the zeros JSON would omit);
`inline package.Message.fieldNumber`: an embedded struct (`json:",inline"`) whose fields
JSON puts in its parent's.
Usage: keep_zero.py GOMODCACHE/k8s.io/api@v0.36.3 GOMODCACHE/k8s.io/apimachinery@v0.36.3"""
import glob, re, sys

api, machinery = sys.argv[1], sys.argv[2]
dirs = [(api + "/core/v1", "k8s.io.api.core.v1"),
        (machinery + "/pkg/apis/meta/v1", "k8s.io.apimachinery.pkg.apis.meta.v1")]
field = re.compile(r'^\s+(\w+)\s+(\*?)([\w.\[\]]+)\s+`json:"([^"]*)"[^`]*protobuf:"(varint|bytes|fixed\d+),')
inline = re.compile(r'^\s+(\w+)\s+`json:",inline"\s+protobuf:"bytes,(\d+),')
out = []
for d, package in dirs:
    for path in sorted(glob.glob(d + "/*.go")):
        if path.endswith("_test.go") or "generated" in path or "zz_" in path:
            continue
        struct = None
        for line in open(path):
            m = re.match(r"^type (\w+) struct", line)
            if m:
                struct = m.group(1)
                continue
            if line.startswith("}"):
                struct = None
            m = inline.match(line)
            if struct and m:
                out.append(f"inline {package}.{struct}.{m.group(2)}")
                continue
            m = field.match(line)
            if not struct or not m:
                continue
            name, ptr, ty, json, wire = m.groups()
            if ty.startswith("[]") and ty != "[]byte":
                continue
            json_name, *opts = json.split(",")
            if ptr or "omitempty" not in opts:
                out.append(f"keep {package}.{struct}.{json_name}")
print("\n".join(sorted(set(out))))
