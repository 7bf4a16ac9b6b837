#!/usr/bin/env bash
# On the GPU host, in a device call that carries .mcpack/ (tools/gpu/pack_mooncake.sh): unpacks the
# mooncake store's package to /tmp/mcsite (site/ for PYTHONPATH, lib/ for LD_LIBRARY_PATH), says which
# shared libraries the host lacks without lib/, imports mooncake.store as SGLang's backend does, and
# starts the package's mooncake_master for a few seconds to read its /health. Leaves /tmp/mcsite for
# the next call on the same warm machine (docs/gpu-runs.md "Run 13").
set -u
mkdir -p /tmp/mcsite && xz -T0 -dc .mcpack/mc.tar.xz | tar -C /tmp/mcsite -xf - || exit 1
cd /tmp/mcsite || exit 1
echo "== host"; head -2 /etc/os-release; ldd --version | head -1
echo "== not found on the host (store.so, mooncake_master)"
ldd site/mooncake/store.so site/mooncake/mooncake_master | grep "not found" | sort -u
echo "== not found with lib/"; LD_LIBRARY_PATH=/tmp/mcsite/lib ldd site/mooncake/store.so | grep "not found"
for L in "" /tmp/mcsite/lib; do
  echo "== import mooncake.store (LD_LIBRARY_PATH=$L)"
  LD_LIBRARY_PATH=$L PYTHONPATH=/tmp/mcsite/site timeout 60 python3 -c \
    "import mooncake.store as s; print('ok', s.MooncakeDistributedStore)" 2>&1 | tail -3
done
echo "== mooncake_master"
(LD_LIBRARY_PATH=/tmp/mcsite/lib PYTHONPATH=/tmp/mcsite/site setsid python3 -c \
  "import sys; from mooncake.cli import main; sys.exit(main())" --rpc_port=50051 --rpc_address=127.0.0.1 \
  --metrics_port=9003 --metrics_host=127.0.0.1 > /tmp/mcm.log 2>&1 &)
sleep 4; curl -s -m 3 127.0.0.1:9003/health; echo; tail -3 /tmp/mcm.log | cut -c1-300
pkill -f mooncake_master; echo "== done"
