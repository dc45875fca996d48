// The fast optimizer updates (sgd_step, adam_step): threading, dispatch and 16-bit staging
// around the SIMD functors sgd_step_fn and adam_step_fn of simd/kernels.hpp.
//
// - Threads split the element range (parallel_for, >= `grain` elements a chunk); an element's
//   result does not depend on the chunking, so it does not depend on the thread count.
// - float32 and float64 run in place on the operands. float16 and bfloat16 are widened into
//   float32 pieces that stay in L1 (the conversions of convert.hpp), updated there by the same
//   functor and rounded once on store, as the kernel contract says.
// - At simd_level::scalar the dispatch serves their xgrad::cpu::reference twins instead.
#include <algorithm>
#include <array>
#include <cstdint>
#include <type_traits>

#include "backends/common/convert.hpp"
#include "backends/cpu/cpu_kernels.hpp"
#include "backends/cpu/dispatch.hpp"
#include "backends/cpu/simd/kernels.hpp"
#include "xgrad/thread_pool.hpp"

namespace xgrad::cpu
{
    namespace
    {
        using detail::grain;
        using detail::simd_call;
        using kernels::detail::convert;

        /// Elements of a staged 16-bit piece: 4 operands of 1 KiB each in float32.
        constexpr std::int64_t piece = 256;

        /// Runs update(outs, ins, n) over [0, n) with operands of element type E: directly
        /// when E is the compute type C, else through float32 pieces. outs/ins are arrays of
        /// pointers (null entries stay null).
        template <class E, class C, std::size_t NOut, std::size_t NIn, class F>
        void run_update(std::int64_t n, const std::array<void*, NOut>& outs, const std::array<const void*, NIn>& ins,
                        F&& update)
        {
            parallel_for(0, n, grain, [&](std::int64_t begin, std::int64_t end) {
                if constexpr (std::is_same_v<E, C>)
                {
                    std::array<C*, NOut> o{};
                    std::array<const C*, NIn> in{};
                    for (std::size_t k = 0; k < NOut; ++k)
                        o[k] = outs[k] ? static_cast<C*>(outs[k]) + begin : nullptr;
                    for (std::size_t k = 0; k < NIn; ++k)
                        in[k] = ins[k] ? static_cast<const C*>(ins[k]) + begin : nullptr;
                    update(o, in, end - begin);
                }
                else
                {
                    C in_buf[NIn][piece], out_buf[NOut][piece];
                    for (std::int64_t i = begin; i < end; i += piece)
                    {
                        const std::int64_t m = std::min(piece, end - i);
                        std::array<C*, NOut> o{};
                        std::array<const C*, NIn> in{};
                        for (std::size_t k = 0; k < NIn; ++k)
                        {
                            if (!ins[k])
                                continue;
                            const E* src = static_cast<const E*>(ins[k]) + i;
                            for (std::int64_t j = 0; j < m; ++j)
                                in_buf[k][j] = convert<C>(src[j]);
                            in[k] = in_buf[k];
                        }
                        for (std::size_t k = 0; k < NOut; ++k)
                            o[k] = outs[k] ? out_buf[k] : nullptr;
                        update(o, in, m);
                        for (std::size_t k = 0; k < NOut; ++k)
                        {
                            if (!outs[k])
                                continue;
                            E* dst = static_cast<E*>(outs[k]) + i;
                            for (std::int64_t j = 0; j < m; ++j)
                                dst[j] = convert<E>(out_buf[k][j]);
                        }
                    }
                }
            });
        }
    }

    void sgd_step(void* param_out, void* momentum_out, const void* param, const void* grad, const void* momentum,
                  dtype dt, std::int64_t n, const kernels::sgd_step_coefficients& c)
    {
        kernels::detail::visit_with_stats(dt, [&](auto e, auto ct) {
            using E = decltype(e);
            using C = decltype(ct);
            run_update<E, C, 2, 3>(n, {param_out, momentum_out}, {param, grad, momentum},
                                   [&](const std::array<C*, 2>& o, const std::array<const C*, 3>& in, std::int64_t m) {
                                       simd_call<simd::sgd_step_fn>(o[0], o[1], in[0], in[1], in[2], m, c);
                                   });
        });
    }

    void adam_step(void* param_out, void* exp_avg_out, void* exp_avg_sq_out, const void* param, const void* grad,
                   const void* exp_avg, const void* exp_avg_sq, dtype dt, std::int64_t n,
                   const kernels::adam_step_coefficients& c)
    {
        kernels::detail::visit_with_stats(dt, [&](auto e, auto ct) {
            using E = decltype(e);
            using C = decltype(ct);
            run_update<E, C, 3, 4>(n, {param_out, exp_avg_out, exp_avg_sq_out}, {param, grad, exp_avg, exp_avg_sq},
                                   [&](const std::array<C*, 3>& o, const std::array<const C*, 4>& in, std::int64_t m) {
                                       simd_call<simd::adam_step_fn>(o[0], o[1], o[2], in[0], in[1], in[2], in[3], m,
                                                                     c);
                                   });
        });
    }
}
