#!/usr/bin/env bash
# Packs what tools/gpu/run_collection.sh needs into .gpu/ (git-ignored through .git/info/exclude),
# small enough that one device call carries it with the checkout (64 MiB in all; carry [".gpu"]):
#   .gpu/ansible-core-2.19.14-noarch.tar.xz  ansible-core 2.19.14 + resolvelib + packaging, pure
#        Python, without ansible_test (2.5 MB) and without cryptography/cffi (only vault needs them),
#        with small bin/ wrappers (ansible, ansible-playbook, ...) for any python3 >= 3.11
#   .gpu/models.tar.xz  .realsg/models (two config.json + tokenizer folders: 1.07 MB -> 69 KB)
#   .gpu/site312.tar.xz  .realsg/site312.tar.xz without type stubs (*.pyi), the test folders of
#        the third-party packages and their Markdown files (63.47 -> 63.11 MB), and without four
#        binaries a dense server + bench_serving never load (-> 55.93 MB; the checkout had grown
#        to 4.2 MiB, and tree + site + ansible no longer fitted one call's 64 MiB):
#          sglang/srt/server/_core*.so  the Rust front end, imported only with SGLANG_RUST_SERVER
#                                       (managers/rust_server.py; 13 MB, 4.2 MB compressed)
#          sglang/srt/grpc/_core*.so    the native gRPC server, imported only with --grpc-port
#                                       (entrypoints/http_server.py says so when it is missing)
#          zstandard/_cffi*.so          zstandard's CFFI backend: on CPython its __init__ imports
#                                       backend_c only (the C extension stays)
#          deep_gemm/include            CUDA headers for DeepGEMM's JIT, read only when it compiles
#                                       an FP8 kernel; no module of sglang/srt imports deep_gemm at
#                                       module level, and the bf16 models here never call it
#        Each was checked by reading the importers in sglang/ (grep -rn "import <name>"): keep that
#        check when adding one, since a call that fails at import costs minutes of device time.
# usage, from the checkout root, after `bash ../shared/gpu/real-sglang/build.sh`:
#   bash tools/gpu/pack.sh
# SITE_DIR=/path/to/unpacked/site: trim and pack that folder (build.sh's unpacked site, untouched:
#   a copy is trimmed) instead of unpacking .realsg/site312.tar.xz: one xz -9 round instead of two
#   on a slow machine (each takes minutes there).
set -eu
ROOT=$(pwd)
SITE_DIR=${SITE_DIR:-}
{ [ -f .realsg/site312.tar.xz ] || [ -d "$SITE_DIR/sglang" ]; } && [ -d .realsg/models ] || { echo "run ../shared/gpu/real-sglang/build.sh first"; exit 1; }
mkdir -p .git/info .gpu
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform any --platform manylinux_2_17_x86_64 -d "$W/whl" ansible-core==2.19.14 resolvelib==1.2.1 packaging==26.4
python3 -m pip install -q --no-deps --no-compile --target "$W/ans" "$W"/whl/*.whl
rm -rf "$W/ans/ansible_test" "$W/ans/bin"
find "$W/ans" -name __pycache__ -prune -exec rm -rf {} +
mkdir "$W/ans/bin"
for c in ansible:adhoc ansible-playbook:playbook ansible-doc:doc ansible-inventory:inventory ansible-config:config; do
  printf '#!/usr/bin/env python3\nimport sys\nfrom ansible.cli.%s import main\nsys.exit(main())\n' "${c##*:}" > "$W/ans/bin/${c%%:*}"
  chmod +x "$W/ans/bin/${c%%:*}"
done
tar -C "$W/ans" -cf - . | xz -9 > .gpu/ansible-core-2.19.14-noarch.tar.xz
tar -C .realsg -cf - models | xz -9 > .gpu/models.tar.xz
if [ -n "$SITE_DIR" ] || [ ! -f .gpu/site312.tar.xz ] || [ .realsg/site312.tar.xz -nt .gpu/site312.tar.xz ]; then
  if [ -n "$SITE_DIR" ]; then cp -a "$SITE_DIR" "$W/site"; else mkdir "$W/site" && xz -dc .realsg/site312.tar.xz | tar -C "$W/site" -xf -; fi
  find "$W/site" -name '*.pyi' -delete
  find "$W/site" -mindepth 2 -type d \( -name tests -o -name test \) -not -path "$W/site/sglang/*" -prune -exec rm -rf {} +
  find "$W/site" -name '*.md' -not -path '*dist-info*' -delete
  rm -rf "$W"/site/sglang/srt/server/_core.*.so "$W"/site/sglang/srt/grpc/_core.*.so "$W"/site/zstandard/_cffi.*.so "$W/site/deep_gemm/include"
  tar -C "$W/site" -cf - . | xz -T2 -9 > .gpu/site312.tar.xz
fi
ls -la .gpu
python3 - <<'PY'
import os, subprocess
files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], capture_output=True, check=True).stdout.split(b"\0")
tree = sum(os.path.getsize(f) for f in files if f and os.path.isfile(f))
carry = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(".gpu") for f in fs)
total = (tree + carry) / 2**20
print(f"travels: tree {tree/2**20:.2f} MiB + carry {carry/2**20:.2f} MiB = {total:.2f} MiB (limit 64)")
if total >= 64:
    raise SystemExit("over the 64 MiB limit: trim the tree or .gpu")
PY
