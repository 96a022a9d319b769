# Shared by scripts/run and scripts/test: install what is missing, then configure and build.
# Sourced, not executed.
set -euo pipefail

HEADROOM_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
HEADROOM_PACKAGES=(
    g++ cmake ninja-build pkg-config git ccache
    qt6-base-dev qt6-charts-dev fonts-dejavu-core libqt6opengl6-dev qt6-svg-dev
    nlohmann-json3-dev libcli11-dev libbenchmark-dev libcurl4-openssl-dev libyaml-cpp-dev
    libtorch-dev libopenblas0-pthread libgloo-dev
    python3-torch python3-jsonschema
    xvfb xauth dpkg-dev file clang libfuzzer-14-dev
)

headroom_install_packages() {
    local missing=()
    for p in "${HEADROOM_PACKAGES[@]}"; do
        if [ "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null)" != "installed" ]; then
            missing+=("$p")
        fi
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" -ne 0 ]; then
        echo "Headroom needs these Debian packages. Install them with:" >&2
        echo "  sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
        exit 2
    fi
    echo "Installing ${#missing[@]} Debian packages: ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# $1: CMake preset (dev, release, asan)
headroom_build() {
    local preset="$1"
    cd "$HEADROOM_ROOT"
    cmake --preset "$preset" >/dev/null
    cmake --build --preset "$preset"
}
