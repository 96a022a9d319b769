#!/bin/sh
# What a CUDA build prints on a machine without a usable GPU.
cat > /dev/null
echo '{"event":"error","code":4,"message":"no CUDA device is usable (driver missing or no GPU)"}'
echo 'headroom-probe: no CUDA device is usable (driver missing or no GPU)' >&2
exit 4
