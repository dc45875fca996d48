#pragma once
// The tests' one table of op codes (backends/common/kernels.hpp): one row per unary, binary and
// reduction op code with its name, the differentiable xgrad op that runs it, where its inputs
// are drawn, and how exactly the backends must agree on it. The row drives the forward-value
// tests (test_ops.cpp), the fast-kernel-vs-reference tests (test_cpu_kernels_*.cpp), the
// CUDA-vs-CPU tests (test_cuda_elementwise*.cpp) and the unary rows of the gradient checks
// (gradcheck_cases.hpp). test_ops.cpp checks that every op code of the lists has exactly one
// row, so an op code added to its list without a row here fails there.
#include <array>
#include <stdexcept>
#include <string>

#include "backends/common/kernels.hpp"
#include "xgrad/xgrad.hpp"

namespace tests
{
    using xgrad::kernels::binary_op;
    using xgrad::kernels::reduce_op;
    using xgrad::kernels::unary_op;

    /// Every op code, in list order.
#define XGRAD_TEST_UNARY(name) unary_op::name,
#define XGRAD_TEST_BINARY(name) binary_op::name,
#define XGRAD_TEST_REDUCE(name) reduce_op::name,
    constexpr std::array<unary_op, xgrad::kernels::unary_op_count> all_unary = {XGRAD_UNARY_OPS(XGRAD_TEST_UNARY)};
    constexpr std::array<binary_op, xgrad::kernels::binary_op_count> all_binary = {XGRAD_BINARY_OPS(XGRAD_TEST_BINARY)};
    constexpr std::array<reduce_op, xgrad::kernels::reduce_op_count> all_reduce = {XGRAD_REDUCE_OPS(XGRAD_TEST_REDUCE)};
#undef XGRAD_TEST_REDUCE
#undef XGRAD_TEST_BINARY
#undef XGRAD_TEST_UNARY

    /// Where an op's inputs are drawn in the op-level tests: anywhere (standard normal), or
    /// kept away from the points where the op or its derivative is undefined or not smooth.
    enum class domain
    {
        any,      // N(0, 1)
        positive, // |N(0, 1)| + 0.5: log, sqrt, rsqrt, pow bases, divisors
        nonzero   // sign(z) (|z| + 0.2): abs, relu, sign-like kinks at 0
    };

    /// How closely two implementations of an op code must agree: bit for bit (IEEE operations,
    /// correctly rounded), or within the libm tolerance each test file states (transcendental
    /// functions, whose implementations round differently).
    enum class tolerance
    {
        exact,
        libm
    };

    /// The interval the kernel tests draw an op's values from (besides special values).
    struct value_range
    {
        double lo, hi;
    };

    struct unary_case
    {
        unary_op op;
        const char* name;
        xgrad::tensor (*apply)(const xgrad::tensor&); // the differentiable op
        domain dom;
        value_range f32, f64; // kernel tests; they reach overflow and underflow where the op has them
        tolerance tol;
    };

    struct binary_case
    {
        binary_op op;
        const char* name;
        xgrad::tensor (*apply)(const xgrad::tensor&, const xgrad::tensor&);
        domain a_dom, b_dom; // the two arguments' domains (pow: a positive base)
        bool differentiable; // comparisons are not: their results never require grad
        tolerance tol;
    };

    struct reduce_case
    {
        reduce_op op;
        const char* name;
        xgrad::tensor (*apply)(const xgrad::tensor&, const xgrad::axes_type&, bool);
        bool empty_allowed; // an empty reduced range: sum gives 0, max throws
    };

#define XGRAD_TEST_OP1(f) [](const xgrad::tensor& x) { return xgrad::f(x); }
#define XGRAD_TEST_OP2(f) [](const xgrad::tensor& a, const xgrad::tensor& b) { return xgrad::f(a, b); }
    // clang-format off
    inline const unary_case unary_cases[] = {
        {unary_op::neg,     "neg",     XGRAD_TEST_OP1(neg),     domain::any,      {-100, 100},  {-100, 100}, tolerance::exact},
        {unary_op::exp,     "exp",     XGRAD_TEST_OP1(exp),     domain::any,      {-110, 95},   {-760, 720}, tolerance::libm},
        {unary_op::log,     "log",     XGRAD_TEST_OP1(log),     domain::positive, {-1, 1e4},    {-1, 1e4},   tolerance::libm},
        {unary_op::sqrt,    "sqrt",    XGRAD_TEST_OP1(sqrt),    domain::positive, {-1, 1e4},    {-1, 1e4},   tolerance::exact},
        {unary_op::rsqrt,   "rsqrt",   XGRAD_TEST_OP1(rsqrt),   domain::positive, {-1, 1e4},    {-1, 1e4},   tolerance::exact},
        {unary_op::abs,     "abs",     XGRAD_TEST_OP1(abs),     domain::nonzero,  {-100, 100},  {-100, 100}, tolerance::exact},
        {unary_op::relu,    "relu",    XGRAD_TEST_OP1(relu),    domain::nonzero,  {-100, 100},  {-100, 100}, tolerance::exact},
        {unary_op::sigmoid, "sigmoid", XGRAD_TEST_OP1(sigmoid), domain::any,      {-40, 40},    {-40, 40},   tolerance::libm},
        {unary_op::tanh,    "tanh",    XGRAD_TEST_OP1(tanh),    domain::any,      {-40, 40},    {-40, 40},   tolerance::libm},
        {unary_op::log1p,   "log1p",   XGRAD_TEST_OP1(log1p),   domain::positive, {-2, 1e4},    {-2, 1e4},   tolerance::libm},
        {unary_op::expm1,   "expm1",   XGRAD_TEST_OP1(expm1),   domain::any,      {-110, 95},   {-760, 720}, tolerance::libm},
        {unary_op::erf,     "erf",     XGRAD_TEST_OP1(erf),     domain::any,      {-10, 10},    {-10, 10},   tolerance::libm},
    };
    inline const binary_case binary_cases[] = {
        {binary_op::add, "add", XGRAD_TEST_OP2(add), domain::any,      domain::any,      true,  tolerance::exact},
        {binary_op::sub, "sub", XGRAD_TEST_OP2(sub), domain::any,      domain::any,      true,  tolerance::exact},
        {binary_op::mul, "mul", XGRAD_TEST_OP2(mul), domain::any,      domain::any,      true,  tolerance::exact},
        {binary_op::div, "div", XGRAD_TEST_OP2(div), domain::any,      domain::positive, true,  tolerance::exact},
        {binary_op::pow, "pow", XGRAD_TEST_OP2(pow), domain::positive, domain::any,      true,  tolerance::libm},
        {binary_op::eq,  "eq",  XGRAD_TEST_OP2(eq),  domain::any,      domain::any,      false, tolerance::exact},
        {binary_op::ne,  "ne",  XGRAD_TEST_OP2(ne),  domain::any,      domain::any,      false, tolerance::exact},
        {binary_op::lt,  "lt",  XGRAD_TEST_OP2(lt),  domain::any,      domain::any,      false, tolerance::exact},
        {binary_op::le,  "le",  XGRAD_TEST_OP2(le),  domain::any,      domain::any,      false, tolerance::exact},
        {binary_op::gt,  "gt",  XGRAD_TEST_OP2(gt),  domain::any,      domain::any,      false, tolerance::exact},
        {binary_op::ge,  "ge",  XGRAD_TEST_OP2(ge),  domain::any,      domain::any,      false, tolerance::exact},
    };
    inline const reduce_case reduce_cases[] = {
        {reduce_op::sum, "sum", [](const xgrad::tensor& x, const xgrad::axes_type& a, bool k) { return xgrad::sum(x, a, k); }, true},
        {reduce_op::max, "max", [](const xgrad::tensor& x, const xgrad::axes_type& a, bool k) { return xgrad::max(x, a, k); }, false},
    };
    // clang-format on
#undef XGRAD_TEST_OP2
#undef XGRAD_TEST_OP1

    /// The row of an op code; throws std::logic_error naming the code when it has none.
    template <class Case, std::size_t N, class Op>
    const Case& row_of(const Case (&rows)[N], Op op, const char* list)
    {
        for (const Case& c : rows)
            if (c.op == op)
                return c;
        throw std::logic_error(std::string("tests/support/op_cases.hpp has no row for ") + list + " op code " +
                               std::to_string(static_cast<int>(op)));
    }
    inline const unary_case& case_of(unary_op op) { return row_of(unary_cases, op, "unary"); }
    inline const binary_case& case_of(binary_op op) { return row_of(binary_cases, op, "binary"); }
    inline const reduce_case& case_of(reduce_op op) { return row_of(reduce_cases, op, "reduce"); }
}
