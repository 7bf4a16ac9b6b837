#!/usr/bin/env bash
# Packs the mooncake store's package for a device call (issue 30: the mooncake storage tier on a
# GPU host without internet) into .mcpack/mc.tar.xz (git-ignored), ~21 MB: too big to travel with
# .gpu/ (a call carries 64 MiB in all), so it goes in a call of its own that unpacks it to
# /tmp/mcsite on the machine (tools/gpu/mooncake_prep.sh), and the next call, on the same warm
# machine, carries .gpu/ as usual (docs/gpu-runs.md "Run 13").
#   site/  mooncake-transfer-engine-cuda13 0.3.13.post1 (cp312; the CUDA 13 build, as SGLang
#          0.5.17's stack is) without what the store and its master never load: libmooncake_pg.so
#          (the torch process group, 162 MB), transfer_engine_bench, libmooncake_ep_device.so,
#          mooncake_client, the _ep and pg_* extensions
#   lib/   the shared libraries store.so and mooncake_master link beyond glibc (libibverbs, libmlx5,
#          libnuma, libcurl and theirs), from this machine's Debian 12 packages (apt-get install
#          libibverbs1 ibverbs-providers libnuma1 libcurl4 first): used only where the GPU host lacks them
# usage, from the checkout root: bash tools/gpu/pack_mooncake.sh
set -eu
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux_2_28_x86_64 \
  -d "$W/whl" mooncake-transfer-engine-cuda13==0.3.13.post1
mkdir -p "$W/pack/site" "$W/pack/lib"
(cd "$W/pack/site" && unzip -q "$W"/whl/*.whl)
(cd "$W/pack/site/mooncake" && rm -f libmooncake_pg.so transfer_engine_bench libmooncake_ep_device.so mooncake_client _ep*.so pg_*.so)
for l in $(ldd "$W/pack/site/mooncake/store.so" "$W/pack/site/mooncake/mooncake_master" | awk '/=> \//{print $3}' | sort -u); do
  case $(basename "$l") in
    libc.so*|libm.so*|libpthread*|libdl.so*|librt.so*|libgcc_s*|libstdc++*|libresolv*) ;;
    *) case $l in "$W"/*) ;; *) cp -L "$l" "$W/pack/lib/";; esac;;
  esac
done
mkdir -p .mcpack
grep -qx '/.mcpack/' .git/info/exclude 2>/dev/null || echo '/.mcpack/' >> .git/info/exclude
tar -C "$W/pack" -cf - site lib | xz -T2 -9 > .mcpack/mc.tar.xz
ls -la .mcpack/mc.tar.xz
