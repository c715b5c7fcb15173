#!/bin/bash
# Writes OUT (default: .build/dra-upstream-cases.jsonl): the shared allocator test cases
# of k8s.io/dynamic-resource-allocation@v0.37.2 (structured/internal/allocatortesting),
# each with its inputs and the outcome of upstream's incubating allocator, for
# dra/tests/upstream_cases.rs, which runs this when OUT is missing (`make test` runs it
# beforehand, in the background). Needs Go and the module (from the Go module proxy); the
# cases are upstream's, so they are generated, never committed.
#
#   dra/tests/upstream/generate.sh [OUT]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/../../../.build/dra-upstream-cases.jsonl}
mkdir -p "$(dirname "$out")"
out=$(cd "$(dirname "$out")" && pwd)/$(basename "$out")
version=v0.37.2
src=$(go env GOMODCACHE)/k8s.io/dynamic-resource-allocation@$version
if [ ! -d "$src" ]; then
  (cd "$(mktemp -d)" && go mod init tmp >/dev/null 2>&1 && go mod download k8s.io/dynamic-resource-allocation@$version)
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$src/." "$work/"
chmod -R u+w "$work"
t=$work/structured/internal/allocatortesting
sed -i 's/^\tRunTestAllocator(t, supportedFeatures, newAllocator, testcases)$/\tRunHook(t, supportedFeatures, newAllocator, testcases)/' "$t/allocator_testing.go" "$t/lexicographical_testing.go"
grep -q RunHook "$t/allocator_testing.go"
cp "$here/dump.go.txt" "$t/dump.go"
cat > "$work/structured/internal/incubating/dump_test.go" <<'GO'
package incubating

import (
	"context"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured/internal"
	"k8s.io/dynamic-resource-allocation/structured/internal/allocatortesting"
)

func TestDump(t *testing.T) {
	allocatortesting.RunHook = allocatortesting.Dump
	newAllocator := func(ctx context.Context, features Features, allocatedState AllocatedState,
		classLister DeviceClassLister, slices []*resourceapi.ResourceSlice, celCache *cel.Cache) (internal.Allocator, error) {
		return NewAllocator(ctx, features, allocatedState, classLister, slices, celCache)
	}
	allocatortesting.TestAllocator(t, SupportedFeatures, newAllocator)
	allocatortesting.TestLexicographicalAllocator(t, SupportedFeatures, newAllocator)
}
GO
# Written beside OUT and renamed: a reader never sees half a file, and two runs at once
# (the test's and make test's) each leave a whole one.
tmp="$out.tmp.$$"
(cd "$work" && DRA_CASES_OUT="$tmp" go test -count=1 -run '^TestDump$' ./structured/internal/incubating/ >"$work/test.log" 2>&1) || { tail -50 "$work/test.log"; rm -f "$tmp"; exit 1; }
mv "$tmp" "$out"
wc -l "$out"
