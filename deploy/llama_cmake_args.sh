#!/usr/bin/env bash
# CMAKE_ARGS for compiling llama-cpp-python on this machine, chosen from the CPU it runs on.
#
# On x86-64 llama.cpp's native build (-march=native) turns on its AMX kernels wherever the
# CPU has AMX (recent Intel Xeons), and those kernels segfault on the first decode of the
# shipped models (ggml_backend_amx_mul_mat). Turning GGML_AMX_* off is not enough while
# GGML_NATIVE is on, because -march=native defines the AMX macros again; so on x86-64 we
# build non-native and name each instruction set the CPU actually has, AMX excluded. A
# flag the CPU lacks is left off, so the build still runs on the machine that made it.
# Elsewhere (ARM) the native build has no AMX and is kept.
# An explicit CMAKE_ARGS in the environment wins; CPUINFO names another cpuinfo file (tests).
set -euo pipefail
if [ -n "${CMAKE_ARGS:-}" ]; then echo "$CMAKE_ARGS"; exit 0; fi
case "$(uname -m)" in
  x86_64|amd64) ;;
  *) exit 0 ;;
esac
flags=" $(grep -m1 '^flags' "${CPUINFO:-/proc/cpuinfo}" | cut -d: -f2) "
has() { [[ "$flags" == *" $1 "* ]]; }
args=(-DGGML_NATIVE=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF)
option() { if has "$2"; then args+=("-D$1=ON"); else args+=("-D$1=OFF"); fi; }
option GGML_SSE42 sse4_2
option GGML_AVX avx
option GGML_AVX2 avx2
option GGML_BMI2 bmi2
option GGML_FMA fma
option GGML_F16C f16c
option GGML_AVX_VNNI avx_vnni
option GGML_AVX512 avx512f
option GGML_AVX512_VBMI avx512vbmi
option GGML_AVX512_VNNI avx512_vnni
option GGML_AVX512_BF16 avx512_bf16
echo "${args[*]}"
