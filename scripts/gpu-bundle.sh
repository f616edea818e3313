#!/usr/bin/env bash
# gpu-bundle.sh — build here what scripts/gpu-check.sh runs on a GPU machine that has no
# network and none of the build's Debian libraries: libtide.so, tide (tided) and the test
# runner, stripped of debug sections, with every shared library they need beyond glibc, in
# one directory small enough to travel with the working tree (at most 64 MiB in all).
#
#   scripts/gpu-bundle.sh [DIR]          (default build/gpu-bundle)
#
# DIR/libtide.so, DIR/tide, DIR/tide-tests; DIR/lib/ the libraries (libxxhash, libcjson,
# liburing, libcurl and what it pulls in, libssl/libcrypto, ...); DIR/MANIFEST what each
# is (its Debian package, the newest glibc symbol version it needs) and the bundle's size.
# gpu-check.sh (BUNDLE=DIR, the default when it cannot build) puts on LD_LIBRARY_PATH only
# the libraries that ldd reports missing on that machine, so the machine's own copies win
# wherever it has them. Exit status: 0, or 1 when the build fails or the bundle is too big.
set -euo pipefail

cd "$(dirname "$0")/.."
DIR=${1:-build/gpu-bundle}
LIMIT=$((48 << 20)) # leaves room under 64 MiB for the working tree itself

make -j"$(nproc)" build/libtide.so build/tide build/tests/tide-tests >/dev/null
rm -rf "$DIR"
mkdir -p "$DIR/lib"
for f in build/libtide.so build/tide build/tests/tide-tests; do
    objcopy --strip-debug "$f" "$DIR/$(basename "$f")"
done
ln -sfn libtide.so "$DIR/libtide.so.0"
ln -sfn tide "$DIR/tided"

# glibc's own libraries are on every Linux; everything else ldd resolves is bundled.
core='^(linux-vdso|libc|libm|libdl|libpthread|librt|libresolv|libutil|ld-linux-x86-64|ld-linux-aarch64)\.so'
ldd "$DIR/libtide.so" "$DIR/tide" "$DIR/tide-tests" | awk '/=> \//{print $1, $3}' | sort -u |
    while read -r name path; do
        if [[ $name =~ $core ]]; then continue; fi
        cp -L "$path" "$DIR/lib/$name"
    done

os_name() { sed -n 's/^PRETTY_NAME="\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' /etc/os-release 2>/dev/null; }
glibc_need() { objdump -T "$1" 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1; }
{
    echo "# gpu-bundle made $(date -u +%FT%TZ) on $(os_name), $(ldd --version | head -1)"
    echo "# commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet 2>/dev/null || echo ' (modified)')"
    for f in "$DIR"/libtide.so "$DIR"/tide "$DIR"/tide-tests; do
        echo "$(basename "$f") $(stat -c %s "$f") bytes, needs $(glibc_need "$f")"
    done
    for f in "$DIR"/lib/*; do
        pkg=$(dpkg -S "$(basename "$f")" 2>/dev/null | head -1 | cut -d: -f1 || true)
        echo "lib/$(basename "$f") $(stat -c %s "$f") bytes, ${pkg:-?}, needs $(glibc_need "$f")"
    done
} >"$DIR/MANIFEST"
size=$(du -sb "$DIR" | cut -f1)
echo "total $size bytes" >>"$DIR/MANIFEST"
cat "$DIR/MANIFEST"
if [ "$size" -gt "$LIMIT" ]; then
    echo "the bundle is $size bytes, over $LIMIT: it would not travel" >&2
    exit 1
fi
echo "bundle in $DIR ($((size >> 20)) MiB); on the GPU machine: BUNDLE=$DIR scripts/gpu-check.sh"
