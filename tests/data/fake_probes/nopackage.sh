#!/bin/sh
# What the transformers engine prints where the interpreter has no PyTorch: exit 4, field "package".
cat > /dev/null
echo '{"event":"error","code":4,"field":"package","message":"the transformers engine needs PyTorch, which this interpreter (/usr/bin/python3) cannot import"}'
echo 'headroom-probe: the transformers engine needs PyTorch' >&2
exit 4
