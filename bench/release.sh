#!/usr/bin/env bash
# release.sh: build the release archives in snapshot mode (nothing is
# published) and check them: bash bench/release.sh
#
# It installs the pinned GoReleaser from the module proxy into a cache
# directory of its own (its first build takes several minutes), then runs
# TestReleaseSnapshot, which runs .goreleaser.yaml with --snapshot into a
# temporary dist/ and checks the four archives (linux and darwin, amd64
# and arm64), each binary's target, checksums.txt and the version the
# host's binary prints. It is a step of its own rather than part of the
# test suite because of those minutes.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
GORELEASER_VERSION=v2.15.1
dir="${XDG_CACHE_HOME:-$HOME/.cache}/ringlb-tools/goreleaser-$GORELEASER_VERSION"
if [ ! -x "$dir/goreleaser" ]; then
  echo "== go install goreleaser $GORELEASER_VERSION into $dir"
  mkdir -p "$dir"
  GOBIN="$dir" go install github.com/goreleaser/goreleaser/v2@v2.15.1   # = GORELEASER_VERSION
fi
cd "$repo"
RINGLB_GORELEASER="$dir/goreleaser" go test -count=1 -run 'TestReleaseSnapshot' -v ./examples/
