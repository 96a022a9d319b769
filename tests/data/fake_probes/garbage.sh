#!/bin/sh
# A probe that prints something that is not the protocol and exits 0.
cat > /dev/null
echo 'Segmentation fault? no: just some text a wrapper printed'
echo '<html>502 Bad Gateway</html>'
exit 0
