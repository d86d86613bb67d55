# cgpu's in-session probe for WSL: what the GPU paravirtualization gives this distro.
#
# POSIX sh; busybox alone is enough. cgpu runs it with one call,
#     wsl.exe -d DISTRO -e sh -c "<this text>" cgpu-wsl-probe SMI_TIMEOUT PY_TIMEOUT
# and, when PY_TIMEOUT > 0, sends its local probe (probe.py) on stdin for python3, which runs
# it as `python3 -c <probe.py> --child API` (its one-API entry point; no file is written).
#
# Output (format 1): the line "cgpu-wsl-probe 1", then "key=value" lines whose value is
# always the lower-case hex of its bytes (so no file name, os-release or tool output can
# break the format), then the line "cgpu-wsl-probe end". Lists are joined with "/", which
# no file name can contain. The script always exits 0: its findings are in-band, so its
# exit status never collides with wsl.exe's own -1.

smi_timeout=${1:-10}
py_timeout=${2:-0}
lib=/usr/lib/wsl/lib
drivers=/usr/lib/wsl/drivers

hex() {
    printf '%s' "$1" | od -An -v -tx1 | tr -d ' \n'
}

emit() {
    printf '%s=%s\n' "$1" "$(hex "$2")"
}

emit_file() {  # key path: the first 64 KiB of a file, when it is readable
    if [ -f "$2" ] && [ -r "$2" ]; then
        printf '%s=%s\n' "$1" "$(head -c 65536 "$2" | od -An -v -tx1 | tr -d ' \n')"
    fi
}

names() {  # the entry names of a directory, joined by "/"
    out=
    for entry in "$1"/* "$1"/.[!.]*; do
        [ -e "$entry" ] || [ -L "$entry" ] || continue
        out="$out${out:+/}${entry##*/}"
    done
    printf '%s' "$out"
}

echo "cgpu-wsl-probe 1"

# The GPU: /dev/dxg (dxgkrnl) is the only GPU device on WSL; /dev/dri there is VGEM.
if [ -c /dev/dxg ]; then
    emit dxg char
    access=
    [ -r /dev/dxg ] && access=r
    [ -w /dev/dxg ] && access="${access}w"
    emit dxg_access "${access:-none}"
elif [ -e /dev/dxg ]; then
    emit dxg other
else
    emit dxg missing
fi
[ -d /dev/dri ] && emit dri "$(names /dev/dri)"

# Microsoft's D3D12/DXCore libraries and the vendors' (NVIDIA: libcuda, nvidia-smi).
if [ -d "$lib" ]; then
    emit wsl_lib "$(names "$lib")"
else
    emit wsl_lib_missing yes
fi

# The Windows driver store: one folder per driver package; GPU drivers carry Linux .so files.
if [ -d "$drivers" ]; then
    emit drivers "$(names "$drivers")"
    for folder in "$drivers"/*/; do
        folder=${folder%/}
        for file in "$folder"/*.so "$folder"/*.so.*; do
            [ -e "$file" ] && emit driver_so "${folder##*/}/${file##*/}"
        done
    done
fi

# What the distro itself has of the two image-side routes: AMD's librocdxg (ROCm's /dev/dxg path,
# which a container can mount from here) and Mesa's Dozen ICD (Vulkan on D3D12).
for file in /opt/rocm/lib/librocdxg.so /opt/rocm-*/lib/librocdxg.so /usr/lib/librocdxg.so \
    /usr/local/lib/librocdxg.so /usr/lib/x86_64-linux-gnu/librocdxg.so; do
    [ -e "$file" ] && emit rocdxg "$file"
done
for file in /usr/share/vulkan/icd.d/dzn_icd*.json /etc/vulkan/icd.d/dzn_icd*.json \
    /usr/local/share/vulkan/icd.d/dzn_icd*.json; do
    [ -e "$file" ] && emit dzn_icd "$file"
done

# libc: glibc's loader is ld-linux*, musl's is ld-musl-*.
loaders=
for loader in /lib/ld-musl-*.so.1 /lib/ld-linux*.so.* /lib64/ld-linux*.so.* /lib/*-linux-gnu*/ld-linux*.so.* \
    /usr/lib/ld-linux*.so.* /usr/lib64/ld-linux*.so.*; do
    [ -e "$loader" ] && loaders="$loaders${loaders:+/}${loader#/}"
done
emit libc_loaders "$loaders"

# Kernel, distro, WSL markers (WSL 2 kernels say "microsoft-standard", WSL 1's end in "-Microsoft").
if [ -r /proc/sys/kernel/osrelease ]; then
    emit_file kernel /proc/sys/kernel/osrelease
else
    emit kernel "$(uname -r 2>/dev/null)"
fi
emit_file os_release /etc/os-release
[ -f /etc/os-release ] || emit_file os_release /usr/lib/os-release
emit_file wsl_conf /etc/wsl.conf
[ -n "${WSL_DISTRO_NAME:-}" ] && emit wsl_distro_name "$WSL_DISTRO_NAME"
[ -n "${WSL_INTEROP:-}" ] && emit wsl_interop "$WSL_INTEROP"

have_timeout=
command -v timeout >/dev/null 2>&1 && have_timeout=yes

# The local probe (cgpu's probe.py, on stdin) in the session's python3: DirectML adapters through
# DXCore (hardware or WARP) and CUDA through cuInit, one python per API (a driver may crash).
if [ "$py_timeout" -gt 0 ] 2>/dev/null; then
    python=$(command -v python3 2>/dev/null)
    if [ -z "$python" ]; then
        emit python3 missing
    else
        emit python3 "$python"
        src=$(cat)
        for api in directml cuda; do
            if [ -n "$have_timeout" ]; then
                out=$(timeout "$py_timeout" "$python" -I -S -c "$src" --child "$api" </dev/null 2>/dev/null)
                emit "local_${api}_rc" "$?"
                emit "local_$api" "$out"
            else
                emit "local_${api}_rc" no-timeout
            fi
        done
    fi
fi

# nvidia-smi from NVIDIA's WSL driver: driver and CUDA versions, or why NVML fails.
if [ -x "$lib/nvidia-smi" ]; then
    if [ -n "$have_timeout" ]; then
        out=$(timeout "$smi_timeout" "$lib/nvidia-smi" </dev/null 2>&1)
        emit nvidia_smi_rc "$?"
        emit nvidia_smi "$out"
    else
        emit nvidia_smi_rc no-timeout
    fi
fi

echo "cgpu-wsl-probe end"
exit 0
