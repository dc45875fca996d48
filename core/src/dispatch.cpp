#include "dispatch.hpp"

#include <stdexcept>

namespace xgrad::detail
{
    namespace
    {
        constexpr backend_kernels cpu_kernels{
            &cpu::allocate, &cpu::deallocate, &cpu::copy_to_host, &cpu::copy_from_host,
            &cpu::fill,     &cpu::copy,       &cpu::unary,        &cpu::binary,
            &cpu::where,    &cpu::reduce,     &cpu::matmul,       &cpu::one_hot,
        };
    }

    const backend_kernels& backend_for(device dev)
    {
        if (dev.type == device_type::cpu)
            return cpu_kernels;
        throw std::runtime_error("no backend for device " + to_string(dev) +
                                 ": this build of xgrad has no CUDA backend");
    }
}
