// take and put_add: gather and scatter-add by position. take(x, idx) is linear in x with the
// 0/1 matrix A[i, idx[i]]; put_add(g, idx, shape) is linear in g with A's transpose, so each
// is the other's vector-Jacobian product and both backward rules are the other op.
#include "xgrad/ops/index.hpp"

#include <string>

#include "../detail.hpp"
#include "../dispatch.hpp"
#include "core/src/profiler/record.hpp"
#include "xgrad/autograd.hpp"
#include "xgrad/errors.hpp"
#include "xgrad/factories.hpp"

namespace xgrad
{
    namespace
    {
        void check_args(const tensor& idx, const tensor& data, const char* op)
        {
            detail::check_defined(idx, op);
            detail::check_defined(data, op);
            if (idx.dtype() != dtype::int64)
                throw xgrad::invalid_argument(std::string(op) + ": idx must be int64, got " +
                                              std::string(name(idx.dtype())));
            if (!is_floating(data.dtype()))
                throw xgrad::invalid_argument(std::string(op) + ": the data must be floating point, got " +
                                              std::string(name(data.dtype())));
            if (idx.device() != data.device())
                throw xgrad::invalid_argument(std::string(op) + ": idx is on " + to_string(idx.device()) +
                                              " and the data on " + to_string(data.device()));
        }

        [[noreturn]] void bad_position(const char* op, const tensor& idx, std::int64_t at, std::int64_t numel)
        {
            std::int64_t v = 0;
            to_host(idx.reshape({-1}).slice(0, at, at + 1), &v, dtype::int64);
            throw xgrad::invalid_argument(std::string(op) + ": idx[" + std::to_string(at) + "] (row-major) = " +
                                          std::to_string(v) + " is outside [0, " + std::to_string(numel) + ")");
        }
    }

    tensor take(const tensor& x, const tensor& idx)
    {
        XGRAD_PROFILE_OP("take");
        check_args(idx, x, "take");
        const tensor xc = detail::raw_contiguous(x), ic = detail::raw_contiguous(idx);
        tensor out = detail::empty(idx.shape(), x.dtype(), x.device());
        const std::int64_t bad = detail::backend_for(x.device())
                                     .take(out.data_ptr(), xc.data_ptr(), xc.numel(), ic.data<std::int64_t>(),
                                           x.dtype(), ic.numel());
        if (bad >= 0)
            bad_position("take", idx, bad, x.numel());
        record("take", {x}, {out}, [ic, shape = x.shape()](function_node&, const std::vector<tensor>& g) {
            return std::vector<tensor>{put_add(g[0], ic, shape)};
        });
        return out;
    }

    tensor put_add(const tensor& g, const tensor& idx, const shape_type& shape)
    {
        XGRAD_PROFILE_OP("put_add");
        check_args(idx, g, "put_add");
        if (g.shape() != idx.shape())
            throw xgrad::invalid_argument("put_add: g of shape " + shape_to_string(g.shape()) + " and idx of shape " +
                                          shape_to_string(idx.shape()) + " must match");
        const tensor gc = detail::raw_contiguous(g), ic = detail::raw_contiguous(idx);
        tensor out = detail::empty(shape, g.dtype(), g.device());
        const std::int64_t bad = detail::backend_for(g.device())
                                     .put_add(out.data_ptr(), out.numel(), gc.data_ptr(), ic.data<std::int64_t>(),
                                              g.dtype(), ic.numel());
        if (bad >= 0)
            bad_position("put_add", idx, bad, out.numel());
        record("put_add", {g}, {out},
               [ic](function_node&, const std::vector<tensor>& gg) { return std::vector<tensor>{take(gg[0], ic)}; });
        return out;
    }
}
