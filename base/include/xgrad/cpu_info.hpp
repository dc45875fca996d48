#pragma once
// What the CPU kernels run on, for logs and bug reports: the SIMD level in use and the BLAS
// behind matmul with the kernel set it chose for this processor.
#include <string>

namespace xgrad
{
    /// One line, for example "simd avx512, OpenBLAS 0.3.21 (Haswell kernels)": the level the
    /// CPU kernels use now (after XGRAD_SIMD / limit_simd_level) and OpenBLAS's version and
    /// the kernel set it selected at load time.
    std::string cpu_kernels_description();

    /// Empty, or one sentence on how this machine's GEMMs could run faster without rebuilding
    /// anything: said when the processor has AVX-512 and OpenBLAS runs a kernel set without it,
    /// either because OPENBLAS_CORETYPE in the environment names such a set (the sentence then
    /// names the variable's value) or because the OpenBLAS release is older than the processor.
    /// OpenBLAS makes its choice when it is loaded, before any code of xgrad runs, so xgrad
    /// can only name the setting.
    std::string blas_performance_hint();

    /// Empty where bfloat16 convolutions run on AMX tiles; otherwise one sentence saying that
    /// bfloat16 compute here is float32 arithmetic on widened operands (the processor has no
    /// AMX, or XGRAD_SIMD / limit_amx turned it off): what a mixed-precision run should print
    /// so that nobody expects AMX's speed from it. bfloat16 storage still halves the
    /// activations' bytes.
    std::string bfloat16_notice();
}
