// Elementwise ops: forward through the backend's unary/binary/where kernels, backward written
// with these same ops (so every order of derivative is available). Gradients of broadcast
// operands are summed back to the operand's shape with sum_to.
#include "xgrad/ops/elementwise.hpp"

#include <stdexcept>

#include "../detail.hpp"
#include "core/src/profiler/record.hpp"
#include "xgrad/autograd.hpp"
#include "xgrad/errors.hpp"
#include "xgrad/factories.hpp"
#include "xgrad/ops/reduce.hpp"

namespace xgrad
{
    using kernels::binary_op;
    using kernels::unary_op;

    shape_type broadcast_shapes(const shape_type& a, const shape_type& b)
    {
        const std::size_t n = std::max(a.size(), b.size());
        shape_type out(n);
        for (std::size_t i = 0; i < n; ++i)
        {
            const std::int64_t ea = i < n - a.size() ? 1 : a[i - (n - a.size())];
            const std::int64_t eb = i < n - b.size() ? 1 : b[i - (n - b.size())];
            if (ea != eb && ea != 1 && eb != 1)
                throw xgrad::invalid_argument("shapes " + shape_to_string(a) + " and " + shape_to_string(b) +
                                              " do not broadcast (dimension " + std::to_string(i) + ": " +
                                              std::to_string(ea) + " vs " + std::to_string(eb) + ")");
            out[i] = ea == 1 ? eb : ea;
        }
        return out;
    }

    namespace
    {
        /// x's strides for iterating over `shape` (x's shape broadcasts to it): 0 on
        /// broadcast dimensions.
        strides_type broadcast_strides(const tensor& x, const shape_type& shape)
        {
            const std::size_t lead = shape.size() - static_cast<std::size_t>(x.dim());
            strides_type s(shape.size(), 0);
            for (std::size_t i = 0; i < static_cast<std::size_t>(x.dim()); ++i)
                s[lead + i] = x.shape()[i] == 1 ? 0 : x.strides()[i];
            return s;
        }

        tensor unary_forward(const tensor& x, unary_op op, const char* name)
        {
            detail::check_floating(x, name);
            const dtype cdt = compute_dtype(x.dtype());
            const tensor xc = detail::raw_cast(x, cdt);
            tensor out = detail::empty(x.shape(), cdt, x.device());
            detail::backend_for(x.device())
                .unary(out.data_ptr(), out.strides().data(), xc.data_ptr(), xc.strides().data(), cdt,
                       static_cast<int>(x.dim()), x.shape().data(), op);
            return detail::raw_cast(out, x.dtype());
        }

        tensor binary_forward(const tensor& a, const tensor& b, binary_op op, const char* name)
        {
            detail::check_floating(a, name);
            detail::check_floating(b, name);
            detail::check_same(a, b, name);
            const shape_type shape = broadcast_shapes(a.shape(), b.shape());
            const dtype cdt = compute_dtype(a.dtype());
            const tensor ac = detail::raw_cast(a, cdt), bc = detail::raw_cast(b, cdt);
            const strides_type as = broadcast_strides(ac, shape), bs = broadcast_strides(bc, shape);
            tensor out = detail::empty(shape, cdt, a.device());
            detail::backend_for(a.device())
                .binary(out.data_ptr(), out.strides().data(), ac.data_ptr(), as.data(), bc.data_ptr(), bs.data(), cdt,
                        static_cast<int>(shape.size()), shape.data(), op);
            return detail::raw_cast(out, a.dtype());
        }

        tensor comparison(const tensor& a, const tensor& b, binary_op op, const char* name)
        {
            return binary_forward(a, b, op, name); // never recorded: not differentiable
        }

        tensor none() { return {}; }
    }

    tensor scalar_like(const tensor& x, double value)
    {
        detail::check_defined(x, "scalar_like");
        return full({}, value, x.dtype(), x.device());
    }

    tensor add(const tensor& a, const tensor& b)
    {
        XGRAD_PROFILE_OP("add");
        tensor y = binary_forward(a, b, binary_op::add, "add");
        record("add", {a, b}, {y}, [sa = a.shape(), sb = b.shape()](function_node& self, const std::vector<tensor>& g) {
            return std::vector<tensor>{self.needs_input_grad(0) ? sum_to(g[0], sa) : none(),
                                       self.needs_input_grad(1) ? sum_to(g[0], sb) : none()};
        });
        return y;
    }

    tensor sub(const tensor& a, const tensor& b)
    {
        XGRAD_PROFILE_OP("sub");
        tensor y = binary_forward(a, b, binary_op::sub, "sub");
        record("sub", {a, b}, {y}, [sa = a.shape(), sb = b.shape()](function_node& self, const std::vector<tensor>& g) {
            return std::vector<tensor>{self.needs_input_grad(0) ? sum_to(g[0], sa) : none(),
                                       self.needs_input_grad(1) ? sum_to(neg(g[0]), sb) : none()};
        });
        return y;
    }

    tensor mul(const tensor& a, const tensor& b)
    {
        XGRAD_PROFILE_OP("mul");
        tensor y = binary_forward(a, b, binary_op::mul, "mul");
        record("mul", {a, b}, {y}, [a, b](function_node& self, const std::vector<tensor>& g) {
            return std::vector<tensor>{self.needs_input_grad(0) ? sum_to(mul(g[0], b), a.shape()) : none(),
                                       self.needs_input_grad(1) ? sum_to(mul(g[0], a), b.shape()) : none()};
        });
        return y;
    }

    tensor div(const tensor& a, const tensor& b)
    {
        XGRAD_PROFILE_OP("div");
        tensor y = binary_forward(a, b, binary_op::div, "div");
        // d(a/b)/da = 1/b, d(a/b)/db = -a/b^2
        record("div", {a, b}, {y}, [a, b](function_node& self, const std::vector<tensor>& g) {
            return std::vector<tensor>{self.needs_input_grad(0) ? sum_to(div(g[0], b), a.shape()) : none(),
                                       self.needs_input_grad(1) ? sum_to(neg(div(mul(g[0], a), mul(b, b))), b.shape())
                                                                : none()};
        });
        return y;
    }

    tensor pow(const tensor& a, const tensor& b)
    {
        XGRAD_PROFILE_OP("pow");
        tensor y = binary_forward(a, b, binary_op::pow, "pow");
        // d(a^b)/da = b a^(b-1), d(a^b)/db = a^b ln a. The limits where the formulas give
        // 0 * inf are taken explicitly: d/da is 0 where b = 0 (a^0 is constant, even at a = 0),
        // and d/db is 0 where a = 0 and b >= 0 (0^b is constant there).
        record("pow", {a, b}, {y}, [a, b, ys = save_output(y)](function_node& self, const std::vector<tensor>& g) {
            const tensor zero = scalar_like(g[0], 0.0);
            tensor ga, gb;
            if (self.needs_input_grad(0))
                ga = sum_to(mul(g[0], where(eq(b, zero), zero, mul(b, pow(a, sub(b, scalar_like(b, 1.0)))))),
                            a.shape());
            if (self.needs_input_grad(1))
                gb = sum_to(mul(g[0], where(mul(eq(a, zero), ge(b, zero)), zero, mul(self.unpack(ys), log(a)))),
                            b.shape());
            return std::vector<tensor>{ga, gb};
        });
        return y;
    }

    tensor pow(const tensor& a, double exponent)
    {
        detail::check_floating(a, "pow");
        return pow(a, scalar_like(a, exponent));
    }

    tensor neg(const tensor& x)
    {
        XGRAD_PROFILE_OP("neg");
        tensor y = unary_forward(x, unary_op::neg, "neg");
        record("neg", {x}, {y},
               [](function_node&, const std::vector<tensor>& g) { return std::vector<tensor>{neg(g[0])}; });
        return y;
    }

    tensor exp(const tensor& x)
    {
        XGRAD_PROFILE_OP("exp");
        tensor y = unary_forward(x, unary_op::exp, "exp");
        record("exp", {x}, {y}, [ys = save_output(y)](function_node& self, const std::vector<tensor>& g) {
            return std::vector<tensor>{mul(g[0], self.unpack(ys))};
        });
        return y;
    }

    tensor log(const tensor& x)
    {
        XGRAD_PROFILE_OP("log");
        tensor y = unary_forward(x, unary_op::log, "log");
        record("log", {x}, {y},
               [x](function_node&, const std::vector<tensor>& g) { return std::vector<tensor>{div(g[0], x)}; });
        return y;
    }

    tensor sqrt(const tensor& x)
    {
        XGRAD_PROFILE_OP("sqrt");
        tensor y = unary_forward(x, unary_op::sqrt, "sqrt");
        // d sqrt(x)/dx = 1 / (2 sqrt(x))
        record("sqrt", {x}, {y}, [ys = save_output(y)](function_node& self, const std::vector<tensor>& g) {
            return std::vector<tensor>{div(mul(g[0], scalar_like(g[0], 0.5)), self.unpack(ys))};
        });
        return y;
    }

    tensor rsqrt(const tensor& x)
    {
        XGRAD_PROFILE_OP("rsqrt");
        tensor y = unary_forward(x, unary_op::rsqrt, "rsqrt");
        // d x^(-1/2)/dx = -1/2 x^(-3/2) = -1/2 y^3
        record("rsqrt", {x}, {y}, [ys = save_output(y)](function_node& self, const std::vector<tensor>& g) {
            const tensor yv = self.unpack(ys);
            return std::vector<tensor>{mul(mul(g[0], scalar_like(g[0], -0.5)), mul(yv, mul(yv, yv)))};
        });
        return y;
    }

    tensor square(const tensor& x) { return mul(x, x); }

    tensor abs(const tensor& x)
    {
        XGRAD_PROFILE_OP("abs");
        tensor y = unary_forward(x, unary_op::abs, "abs");
        record("abs", {x}, {y},
               [x](function_node&, const std::vector<tensor>& g) { return std::vector<tensor>{mul(g[0], sign(x))}; });
        return y;
    }

    tensor sign(const tensor& x)
    {
        XGRAD_PROFILE_OP("sign");
        detail::check_floating(x, "sign");
        const tensor zero = scalar_like(x, 0.0);
        return sub(comparison(x, zero, binary_op::gt, "sign"), comparison(x, zero, binary_op::lt, "sign"));
    }

    tensor relu(const tensor& x)
    {
        XGRAD_PROFILE_OP("relu");
        tensor y = unary_forward(x, unary_op::relu, "relu");
        // The derivative is the step x > 0 (0 at x = 0, as in PyTorch).
        record("relu", {x}, {y}, [x](function_node&, const std::vector<tensor>& g) {
            return std::vector<tensor>{mul(g[0], comparison(x, scalar_like(x, 0.0), binary_op::gt, "relu"))};
        });
        return y;
    }

    tensor sigmoid(const tensor& x)
    {
        XGRAD_PROFILE_OP("sigmoid");
        tensor y = unary_forward(x, unary_op::sigmoid, "sigmoid");
        // sigmoid' = y (1 - y)
        record("sigmoid", {x}, {y}, [ys = save_output(y)](function_node& self, const std::vector<tensor>& g) {
            const tensor yv = self.unpack(ys);
            return std::vector<tensor>{mul(g[0], mul(yv, sub(scalar_like(yv, 1.0), yv)))};
        });
        return y;
    }

    tensor tanh(const tensor& x)
    {
        XGRAD_PROFILE_OP("tanh");
        tensor y = unary_forward(x, unary_op::tanh, "tanh");
        // tanh' = 1 - y^2
        record("tanh", {x}, {y}, [ys = save_output(y)](function_node& self, const std::vector<tensor>& g) {
            const tensor yv = self.unpack(ys);
            return std::vector<tensor>{mul(g[0], sub(scalar_like(yv, 1.0), mul(yv, yv)))};
        });
        return y;
    }

    tensor log1p(const tensor& x)
    {
        XGRAD_PROFILE_OP("log1p");
        tensor y = unary_forward(x, unary_op::log1p, "log1p");
        record("log1p", {x}, {y}, [x](function_node&, const std::vector<tensor>& g) {
            return std::vector<tensor>{div(g[0], add(x, scalar_like(x, 1.0)))};
        });
        return y;
    }

    tensor expm1(const tensor& x)
    {
        XGRAD_PROFILE_OP("expm1");
        tensor y = unary_forward(x, unary_op::expm1, "expm1");
        // expm1' = e^x = y + 1
        record("expm1", {x}, {y}, [ys = save_output(y)](function_node& self, const std::vector<tensor>& g) {
            const tensor yv = self.unpack(ys);
            return std::vector<tensor>{mul(g[0], add(yv, scalar_like(yv, 1.0)))};
        });
        return y;
    }

    tensor erf(const tensor& x)
    {
        XGRAD_PROFILE_OP("erf");
        tensor y = unary_forward(x, unary_op::erf, "erf");
        // erf' = 2 / sqrt(pi) e^(-x^2)
        record("erf", {x}, {y}, [x](function_node&, const std::vector<tensor>& g) {
            return std::vector<tensor>{mul(g[0], mul(exp(neg(mul(x, x))), scalar_like(x, 1.1283791670955125739)))};
        });
        return y;
    }

    tensor clamp(const tensor& x, std::optional<double> min, std::optional<double> max)
    {
        XGRAD_PROFILE_OP("clamp");
        detail::check_floating(x, "clamp");
        if (min && max && !(*min <= *max))
            throw xgrad::invalid_argument("clamp: min (" + std::to_string(*min) + ") must not exceed max (" +
                                          std::to_string(*max) + ")");
        // where() keeps NaN (the comparisons are false for it); the gradient reaches x only
        // through where's chosen branch, the bounds being constants.
        tensor y = x;
        if (min)
            y = where(lt(x, scalar_like(x, *min)), scalar_like(x, *min), y);
        if (max)
            y = where(gt(x, scalar_like(x, *max)), scalar_like(x, *max), y);
        return y;
    }

    tensor where(const tensor& cond, const tensor& a, const tensor& b)
    {
        XGRAD_PROFILE_OP("where");
        detail::check_floating(cond, "where (condition)");
        detail::check_floating(a, "where");
        detail::check_same(a, b, "where");
        if (cond.device() != a.device())
            throw xgrad::invalid_argument("where: condition on " + to_string(cond.device()) + " but values on " +
                                          to_string(a.device()));
        const shape_type shape = broadcast_shapes(broadcast_shapes(cond.shape(), a.shape()), b.shape());
        const dtype cdt = compute_dtype(a.dtype());
        const tensor cc = detail::raw_cast(cond, cdt), ac = detail::raw_cast(a, cdt), bc = detail::raw_cast(b, cdt);
        const strides_type cs = broadcast_strides(cc, shape), as = broadcast_strides(ac, shape),
                           bs = broadcast_strides(bc, shape);
        tensor out = detail::empty(shape, cdt, a.device());
        detail::backend_for(a.device())
            .where(out.data_ptr(), out.strides().data(), cc.data_ptr(), cs.data(), ac.data_ptr(), as.data(),
                   bc.data_ptr(), bs.data(), cdt, static_cast<int>(shape.size()), shape.data());
        tensor y = detail::raw_cast(out, a.dtype());
        const tensor mask = cond.detach();
        record("where", {a, b}, {y},
               [mask, sa = a.shape(), sb = b.shape()](function_node& self, const std::vector<tensor>& g) {
                   const tensor zero = scalar_like(g[0], 0.0);
                   return std::vector<tensor>{self.needs_input_grad(0) ? sum_to(where(mask, g[0], zero), sa) : none(),
                                              self.needs_input_grad(1) ? sum_to(where(mask, zero, g[0]), sb) : none()};
               });
        return y;
    }

    tensor eq(const tensor& a, const tensor& b) { return comparison(a, b, binary_op::eq, "eq"); }
    tensor ne(const tensor& a, const tensor& b) { return comparison(a, b, binary_op::ne, "ne"); }
    tensor lt(const tensor& a, const tensor& b) { return comparison(a, b, binary_op::lt, "lt"); }
    tensor le(const tensor& a, const tensor& b) { return comparison(a, b, binary_op::le, "le"); }
    tensor gt(const tensor& a, const tensor& b) { return comparison(a, b, binary_op::gt, "gt"); }
    tensor ge(const tensor& a, const tensor& b) { return comparison(a, b, binary_op::ge, "ge"); }

    tensor operator+(const tensor& a, const tensor& b) { return add(a, b); }
    tensor operator-(const tensor& a, const tensor& b) { return sub(a, b); }
    tensor operator*(const tensor& a, const tensor& b) { return mul(a, b); }
    tensor operator/(const tensor& a, const tensor& b) { return div(a, b); }
    tensor operator-(const tensor& x) { return neg(x); }
    tensor operator+(const tensor& a, double b) { return add(a, scalar_like(a, b)); }
    tensor operator-(const tensor& a, double b) { return sub(a, scalar_like(a, b)); }
    tensor operator*(const tensor& a, double b) { return mul(a, scalar_like(a, b)); }
    tensor operator/(const tensor& a, double b) { return div(a, scalar_like(a, b)); }
    tensor operator+(double a, const tensor& b) { return add(scalar_like(b, a), b); }
    tensor operator-(double a, const tensor& b) { return sub(scalar_like(b, a), b); }
    tensor operator*(double a, const tensor& b) { return mul(scalar_like(b, a), b); }
    tensor operator/(double a, const tensor& b) { return div(scalar_like(b, a), b); }
}
