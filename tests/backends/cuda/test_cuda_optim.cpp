// The CUDA backend's optimizer kernels (sgd_step, adam_step; backends/cuda/optim.cpp) against
// the CPU's reference kernels, and the optimizers on cuda:0 against the same optimizers on the
// CPU. Outputs are pre-filled with NaN: the kernels assign every element.
//
// Tolerance: none, the bits must agree. Both backends compute the shared element formula
// (backends/common/optimizer_math.hpp) with one IEEE operation per product, sum, quotient and
// sqrt (the device's products are __fmul_rn / __dmul_rn, which nvcc never contracts into an
// fma; sqrt and division are IEEE under nvcc's default -prec-sqrt and -prec-div), and 16-bit
// elements are widened and rounded with the same conversions.
#include "tests/backends/cuda/cuda_test_helpers.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>

#include "backends/cpu/cpu_kernels.hpp"
#include "core/src/dispatch.hpp"
#include "xgrad/nn/module.hpp"
#include "xgrad/optim/optimizer.hpp"

using namespace cuda_test;

namespace
{
    const double nan_value = std::numeric_limits<double>::quiet_NaN();
    const xgrad::detail::backend_kernels& dev_kernels() { return xgrad::detail::backend_for(gpu); }

    class one_parameter final : public nn::module
    {
    public:
        explicit one_parameter(const tensor& w) { register_parameter("w", w); }
        std::string_view type_name() const noexcept override { return "one_parameter"; }
    };
}

TEST_CASE("cuda optimizer kernels: sgd_step and adam_step give the CPU reference's bits")
{
    const double c1 = 1.0 - std::pow(0.9, 3.0), c2 = 1.0 - std::pow(0.999, 3.0);
    const kernels::sgd_step_coefficients sgd_cases[] = {{0.1, 0.0, 0.0, 0.0, false},
                                                        {0.1, 0.05, 0.9, 0.0, false},
                                                        {0.05, 0.0, 0.8, 0.3, false},
                                                        {0.03, 0.2, 0.7, 0.0, true}};
    const kernels::adam_step_coefficients adam_cases[] = {{1e-3, 0.9, 0.999, 1e-8, 0.0, false, c1, c2},
                                                          {1e-2, 0.8, 0.99, 1e-6, 0.1, false, c1, c2},
                                                          {3e-3, 0.9, 0.999, 1e-3, 0.05, true, c1, c2}};
    for (const dtype dt : float_dtypes)
        for (const std::int64_t n : {std::int64_t{0}, std::int64_t{1}, std::int64_t{37}, std::int64_t{70000}})
            for (const bool first : {true, false})
            {
                INFO("dtype ", name(dt), " n ", n, first ? " first step" : "");
                const tensor p = random_cpu({n}, dt, 1), g = random_cpu({n}, dt, 2, -1.0, 1.0),
                             m = random_cpu({n}, dt, 3, -0.1, 0.1), v = random_cpu({n}, dt, 4, 0.0, 0.01);
                const tensor pd = p.to(gpu), gd = g.to(gpu), md = m.to(gpu), vd = v.to(gpu);
                for (const auto& c : sgd_cases)
                {
                    const bool mom = c.momentum != 0.0;
                    tensor want_p = full({n}, nan_value, dt), want_b = full({n}, nan_value, dt);
                    const tensor got_p = full({n}, nan_value, dt).to(gpu), got_b = full({n}, nan_value, dt).to(gpu);
                    cpu::reference::sgd_step(want_p.data_ptr(), mom ? want_b.data_ptr() : nullptr, p.data_ptr(),
                                             g.data_ptr(), mom && !first ? m.data_ptr() : nullptr, dt, n, c);
                    dev_kernels().sgd_step(got_p.data_ptr(), mom ? got_b.data_ptr() : nullptr, pd.data_ptr(),
                                           gd.data_ptr(), mom && !first ? md.data_ptr() : nullptr, dt, n, c);
                    check_same_bits(want_p, got_p, "sgd_step param");
                    if (mom)
                        check_same_bits(want_b, got_b, "sgd_step momentum buffer");
                }
                for (const auto& c : adam_cases)
                {
                    tensor want[3], got[3];
                    for (int k = 0; k < 3; ++k)
                    {
                        want[k] = full({n}, nan_value, dt);
                        got[k] = full({n}, nan_value, dt).to(gpu);
                    }
                    cpu::reference::adam_step(want[0].data_ptr(), want[1].data_ptr(), want[2].data_ptr(), p.data_ptr(),
                                              g.data_ptr(), first ? nullptr : m.data_ptr(),
                                              first ? nullptr : v.data_ptr(), dt, n, c);
                    dev_kernels().adam_step(got[0].data_ptr(), got[1].data_ptr(), got[2].data_ptr(), pd.data_ptr(),
                                            gd.data_ptr(), first ? nullptr : md.data_ptr(),
                                            first ? nullptr : vd.data_ptr(), dt, n, c);
                    check_same_bits(want[0], got[0], "adam_step param");
                    check_same_bits(want[1], got[1], "adam_step exp_avg");
                    check_same_bits(want[2], got[2], "adam_step exp_avg_sq");
                }
            }
}

TEST_CASE("cuda optimizers: steps on cuda:0 give the CPU's parameters and state, in place")
{
    for (const char* which : {"sgd", "adam", "adamw"})
    {
        INFO(std::string(which));
        const tensor w0 = random_cpu({3, 50}, dtype::float32, 9);
        one_parameter on_cpu(w0.detach().requires_grad_()), on_gpu(w0.to(gpu).requires_grad_());
        auto cpu_opt = optim::make_optimizer(which, on_cpu, 0.05), gpu_opt = optim::make_optimizer(which, on_gpu, 0.05);
        void* first = nullptr;
        for (std::uint64_t step = 1; step <= 4; ++step)
        {
            const tensor g = random_cpu({3, 50}, dtype::float32, 20 + step);
            on_cpu.parameter("w").set_grad(g);
            on_gpu.parameter("w").set_grad(g.to(gpu));
            cpu_opt->step();
            gpu_opt->step();
            check_same_bits(on_cpu.parameter("w"), on_gpu.parameter("w").to(cpu_device), "parameter");
            for (const auto& [k, t] : cpu_opt->state_dict())
                check_same_bits(t, gpu_opt->state_dict().at(k).to(cpu_device), k);
            void* now = on_gpu.parameter("w").data_ptr();
            if (step == 1)
                first = now;
            else
                CHECK(now == first); // nothing else holds the storage: the step writes into it
        }
    }
}
