// cpu_kernels_description and blas_performance_hint (xgrad/cpu_info.hpp). OpenBLAS names the
// kernel set its dynamic-architecture build picked (openblas_get_corename); the sets with
// AVX-512 GEMM kernels are SkylakeX, Cooperlake and SapphireRapids. OpenBLAS runs a set without
// AVX-512 on an AVX-512 processor when OPENBLAS_CORETYPE in the environment names one, or when
// it does not recognise the processor. Its single-precision GEMM then runs at about 0.6x of the
// AVX-512 set's (measured on an AMD Zen 5 with OpenBLAS 0.3.21, which picks Cooperlake there by
// itself; see docs/performance.md).
#include "xgrad/cpu_info.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <sstream>
#include <string_view>

#include <cblas.h>

#include "backends/cpu/amx/amx.hpp"
#include "backends/cpu/simd/level.hpp"

namespace xgrad
{
    namespace
    {
        std::string lower(std::string s)
        {
            std::transform(s.begin(), s.end(), s.begin(),
                           [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
            return s;
        }

        std::string blas_core() { return openblas_get_corename() ? openblas_get_corename() : "unknown"; }

        /// "OpenBLAS 0.3.21" from openblas_get_config()'s "OpenBLAS 0.3.21 DYNAMIC_ARCH ...".
        std::string blas_version()
        {
            std::istringstream config(openblas_get_config() ? openblas_get_config() : "");
            std::string name, version;
            config >> name >> version;
            return name.empty() ? "OpenBLAS" : name + (version.empty() ? "" : " " + version);
        }
    }

    std::string cpu_kernels_description()
    {
        return std::string("simd ") + cpu::simd_level_name(cpu::simd_level_in_use()) + ", " + blas_version() + " (" +
               blas_core() + " kernels)";
    }

    std::string blas_performance_hint()
    {
        const std::string core = blas_core();
        const std::string c = lower(core);
        const bool avx512_kernels = c == "skylakex" || c == "cooperlake" || c == "sapphirerapids";
        if (cpu::simd_supported() < cpu::simd_level::avx512 || avx512_kernels)
            return {};
        const std::string gain = " (1.7x faster single-precision GEMMs, 1.2x faster training of the example, measured "
                                 "on an AMD Zen 5 with OpenBLAS 0.3.21)";
        if (const char* set = std::getenv("OPENBLAS_CORETYPE"); set != nullptr && *set != '\0')
            return "OPENBLAS_CORETYPE=" + std::string(set) + " in the environment makes OpenBLAS run its " + core +
                   " kernels, which do not use this processor's AVX-512; without it OpenBLAS chooses for the "
                   "processor, and OPENBLAS_CORETYPE=SkylakeX selects its AVX-512 kernels" +
                   gain;
        return "this processor has AVX-512 but OpenBLAS, which does not recognise it, runs its " + core +
               " kernels, which do not use it; OPENBLAS_CORETYPE=SkylakeX in the environment selects its AVX-512 "
               "kernels" +
               gain;
    }

    std::string bfloat16_notice()
    {
        if (cpu::amx_in_use())
            return {};
        const char* why = cpu::amx_supported() ? "AMX is turned off (XGRAD_SIMD below avx512, or limit_amx)"
                                               : "this processor has no AMX";
        return std::string("bfloat16 here is storage, not arithmetic: ") + why +
               ", so bfloat16 convolutions and linear layers compute in float32 on widened operands (the "
               "activations' bytes are halved, the arithmetic is float32's)";
    }
}
