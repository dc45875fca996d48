// one_hot for the CPU backend. Not a math kernel and with nothing to vectorise beyond a fill,
// so it has no reference twin and is the same in every XGRAD_SIMD configuration. Labels are
// validated before anything is written, so an invalid label leaves out untouched.
#include <algorithm>

#include "backends/common/convert.hpp"
#include "backends/cpu/cpu_kernels.hpp"
#include "xgrad/thread_pool.hpp"

namespace xgrad::cpu
{
    std::int64_t one_hot(void* out, const std::int64_t* labels, dtype dt, std::int64_t n, std::int64_t classes)
    {
        for (std::int64_t i = 0; i < n; ++i)
            if (labels[i] < 0 || labels[i] >= classes)
                return i;
        detail::visit_dtype(dt, [&](auto tag) {
            using T = decltype(tag);
            T* rows = static_cast<T*>(out);
            const T zero = detail::convert<T>(0.0), one = detail::convert<T>(1.0);
            // >= 32K elements per thread chunk, as in the other kernels.
            const std::int64_t grain = std::max<std::int64_t>(1, 32768 / std::max<std::int64_t>(1, classes));
            parallel_for(0, n, grain, [&](std::int64_t begin, std::int64_t end) {
                std::fill(rows + begin * classes, rows + end * classes, zero);
                for (std::int64_t i = begin; i < end; ++i)
                    rows[i * classes + labels[i]] = one;
            });
        });
        return -1;
    }
}
