#!/bin/sh
# A probe that dies of a segmentation fault after one progress line.
cat > /dev/null
echo '{"event":"progress","step":0,"phase":"forward","fraction":0.0}'
kill -SEGV $$
