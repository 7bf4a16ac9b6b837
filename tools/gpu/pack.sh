#!/usr/bin/env bash
# Packs what tools/gpu/run_collection.sh needs into .gpu/ (git-ignored through .git/info/exclude),
# small enough that one device call carries it with the checkout (64 MiB in all; carry [".gpu"]):
#   .gpu/ansible-core-2.19.14-noarch.tar.xz  ansible-core 2.19.14 + resolvelib + packaging, pure
#        Python, without ansible_test (2.5 MB) and without cryptography/cffi (only vault needs them),
#        with small bin/ wrappers (ansible, ansible-playbook, ...) for any python3 >= 3.11
#   .gpu/models.tar.xz  .realsg/models (two config.json + tokenizer folders: 1.07 MB -> 69 KB)
#   .gpu/site312.tar.xz  .realsg/site312.tar.xz without type stubs (*.pyi), the test folders of
#        the third-party packages and their Markdown files (63.47 -> 63.11 MB): the checkout grew
#        (tests/fixtures), and tree + site + ansible must stay under one call's 64 MiB
# usage, from the checkout root, after `bash ../shared/gpu/real-sglang/build.sh`:
#   bash tools/gpu/pack.sh
set -eu
ROOT=$(pwd)
[ -f .realsg/site312.tar.xz ] && [ -d .realsg/models ] || { echo "run ../shared/gpu/real-sglang/build.sh first"; exit 1; }
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
if [ ! -f .gpu/site312.tar.xz ] || [ .realsg/site312.tar.xz -nt .gpu/site312.tar.xz ]; then
  mkdir "$W/site" && xz -dc .realsg/site312.tar.xz | tar -C "$W/site" -xf -
  find "$W/site" -name '*.pyi' -delete
  find "$W/site" -mindepth 2 -type d \( -name tests -o -name test \) -not -path "$W/site/sglang/*" -prune -exec rm -rf {} +
  find "$W/site" -name '*.md' -not -path '*dist-info*' -delete
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
