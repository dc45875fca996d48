// The fused batch-norm ops against golden values computed by TensorFlow itself
// (tests/data/batch_norm, made by tools/gen_batch_norm_golden.py; no Python needed here). The
// core functions are checked on every case; the last test runs the same forward and gradient
// cases through the TensorFlow compatibility classes (xgrad/compat/tensorflow.hpp).
//
// Tolerances. TensorFlow computes in float32 and rounds 16-bit results once; so does xgrad.
// Both are within float32 rounding of the exact value, so:
// - float32 outputs: max |xgrad - tf| <= 1e-5 * max(1, max |tf|) over the tensor (float32
//   rounding of sums of at most a few thousand O(1) terms is ~1e-6 relative to the largest
//   magnitude; individual tiny elements can lose relative accuracy to cancellation, which is
//   why the bound is relative to the tensor's magnitude and not per element);
// - float16/bfloat16 outputs: per element, one unit in the last place of the I/O dtype plus the
//   float32 bound above (each side rounds a float32 value once and may land on a neighbour);
// - float64 second-order cases: 1e-12 relative to the tensor's magnitude.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "xgrad/compat/tensorflow.hpp"
#include "xgrad/xgrad.hpp"

using namespace xgrad;
using json = nlohmann::json;

namespace
{
    json load(const std::string& file)
    {
        const std::string path = std::string(XGRAD_TEST_DATA_DIR) + "/batch_norm/" + file;
        std::ifstream in(path);
        REQUIRE_MESSAGE(in.good(), "cannot open " << path);
        return json::parse(in);
    }

    double number(const json& v)
    {
        if (v.is_string())
        {
            const std::string s = v.get<std::string>();
            if (s == "nan")
                return std::nan("");
            return s == "inf" ? HUGE_VAL : -HUGE_VAL;
        }
        return v.get<double>();
    }

    tensor make_tensor(const json& t)
    {
        const dtype dt = t.at("dtype") == "float64"    ? dtype::float64
                         : t.at("dtype") == "float16"  ? dtype::float16
                         : t.at("dtype") == "bfloat16" ? dtype::bfloat16
                                                       : dtype::float32;
        shape_type shape = t.at("shape").get<shape_type>();
        std::vector<double> values;
        for (const auto& v : t.at("data"))
            values.push_back(number(v));
        // Exact: every stored value is representable in its dtype.
        return from_host(values.data(), shape, dtype::float64).to(dt);
    }

    batch_norm_attrs make_attrs(const json& a)
    {
        batch_norm_attrs at;
        at.epsilon = a.at("epsilon").get<float>();
        at.data_format = a.at("data_format").get<std::string>();
        at.is_training = a.at("is_training").get<bool>();
        if (a.contains("exponential_avg_factor"))
            at.exponential_avg_factor = a.at("exponential_avg_factor").get<float>();
        return at;
    }

    void check_output(const tensor& got, const json& want_json, const std::string& what)
    {
        INFO(what);
        if (want_json.at("data").is_null())
            return; // TensorFlow leaves it unwritten
        const tensor want = make_tensor(want_json);
        if (want.numel() == 0 && got.numel() == 0)
            return; // empty outputs: TensorFlow's placeholder shapes ([] vs [0]) are not compared
        REQUIRE(got.shape() == want.shape());
        CHECK(got.dtype() == want.dtype());
        const auto g = to_vector(got), w = to_vector(want);
        double scale = 1;
        for (double v : w)
            if (std::isfinite(v))
                scale = std::max(scale, std::abs(v));
        const dtype dt = want.dtype();
        const double rel = dt == dtype::float64 ? 1e-12 : 1e-5;
        const double ulp = dt == dtype::float16 ? 0x1p-10 : dt == dtype::bfloat16 ? 0x1p-7 : 0.0;
        for (std::size_t i = 0; i < g.size(); ++i)
        {
            if (std::isnan(w[i]))
            {
                CHECK_MESSAGE(std::isnan(g[i]), "element " << i << ": " << g[i] << " where TensorFlow has NaN");
                continue;
            }
            const double tol = rel * scale + ulp * std::abs(w[i]);
            if (!(std::abs(g[i] - w[i]) <= tol))
                FAIL_CHECK("element " << i << ": xgrad " << g[i] << ", TensorFlow " << w[i] << " (tolerance " << tol
                                      << ")");
        }
    }
}

TEST_CASE("fused_batch_norm matches TensorFlow's FusedBatchNormV3")
{
    const json data = load("forward.json");
    REQUIRE(data.at("cases").size() > 50);
    for (const auto& c : data.at("cases"))
    {
        INFO(c.at("name").get<std::string>());
        const auto& in = c.at("inputs");
        const auto r = fused_batch_norm(make_tensor(in.at("x")), make_tensor(in.at("scale")),
                                        make_tensor(in.at("offset")), make_tensor(in.at("mean")),
                                        make_tensor(in.at("variance")), make_attrs(c.at("attrs")));
        const auto& out = c.at("outputs");
        check_output(r.y, out.at("y"), "y");
        // TensorFlow's names for xgrad's outputs: batch_mean/batch_variance are the running
        // statistics, reserve_space_1/2 the saved ones.
        check_output(r.running_mean, out.at("batch_mean"), "running_mean");
        check_output(r.running_var, out.at("batch_variance"), "running_var");
        check_output(r.saved_mean, out.at("reserve_space_1"), "saved_mean");
        check_output(r.saved_var, out.at("reserve_space_2"), "saved_var");
    }
}

TEST_CASE("fused_batch_norm_grad matches TensorFlow's FusedBatchNormGradV3 and V2")
{
    // The V2 cases are 4-D, which fused_batch_norm_grad takes as V3 does; TensorFlow's empty
    // outputs are the compatibility classes' (last test case).
    for (const char* file : {"grad_v3.json", "grad_v2.json"})
    {
        const json data = load(file);
        REQUIRE(data.at("cases").size() > 20);
        for (const auto& c : data.at("cases"))
        {
            INFO(c.at("name").get<std::string>());
            const auto& in = c.at("inputs");
            const auto r = fused_batch_norm_grad(make_tensor(in.at("y_backprop")), make_tensor(in.at("x")),
                                                 make_tensor(in.at("scale")), make_tensor(in.at("reserve_space_1")),
                                                 make_tensor(in.at("reserve_space_2")), make_attrs(c.at("attrs")));
            const auto& out = c.at("outputs");
            check_output(r.dx, out.at("x_backprop"), "dx");
            check_output(r.dscale, out.at("scale_backprop"), "dscale");
            check_output(r.doffset, out.at("offset_backprop"), "doffset");
        }
    }
}

TEST_CASE("second-order gradients match TensorFlow's nested gradient tapes")
{
    const json data = load("second_order.json");
    REQUIRE(data.at("cases").size() >= 12);
    for (const auto& c : data.at("cases"))
    {
        INFO(c.at("name").get<std::string>());
        const auto& in = c.at("inputs");
        const batch_norm_attrs at = make_attrs(c.at("attrs"));
        const tensor x = make_tensor(in.at("x")), scale = make_tensor(in.at("scale")),
                     dy = make_tensor(in.at("y_backprop")), rs1 = make_tensor(in.at("reserve_space_1")),
                     rs2 = make_tensor(in.at("reserve_space_2"));
        const auto first = fused_batch_norm_grad(dy, x, scale, rs1, rs2, at);
        check_output(first.dx, c.at("outputs").at("x_backprop"), "dx");
        const auto r = fused_batch_norm_grad_grad(make_tensor(in.at("A")), make_tensor(in.at("a")),
                                                  make_tensor(in.at("b")), dy, x, scale, rs1, rs2, at);
        check_output(r.d_dy, c.at("outputs").at("d_y_backprop"), "d_dy");
        check_output(r.d_x, c.at("outputs").at("d_x"), "d_x");
        check_output(r.d_scale, c.at("outputs").at("d_scale"), "d_scale");
        // The same second order through autograd: the gradient op's own gradient.
        const tensor dyl = dy.detach().requires_grad_(), xl = x.detach().requires_grad_(),
                     sl = scale.detach().requires_grad_();
        const auto g1 = fused_batch_norm_grad(dyl, xl, sl, rs1, rs2, at);
        const auto g2 = grad({g1.dx, g1.dscale, g1.doffset}, {dyl, xl, sl},
                             {make_tensor(in.at("A")), make_tensor(in.at("a")), make_tensor(in.at("b"))});
        check_output(g2[0], c.at("outputs").at("d_y_backprop"), "d_dy through autograd");
        check_output(g2[1], c.at("outputs").at("d_x"), "d_x through autograd");
        check_output(g2[2], c.at("outputs").at("d_scale"), "d_scale through autograd");
    }
}

TEST_CASE("the compatibility classes match TensorFlow: FusedBatchNormV3, FusedBatchNormGradV3 and V2")
{
    namespace tf = xgrad::compat::tensorflow;
    const tf::Scope scope = tf::Scope::NewRootScope();
    const auto forward_attrs = [](const json& a) {
        auto r = tf::ops::FusedBatchNormV3::Epsilon(a.at("epsilon").get<float>())
                     .DataFormat(a.at("data_format").get<std::string>())
                     .IsTraining(a.at("is_training").get<bool>());
        return a.contains("exponential_avg_factor")
                   ? r.ExponentialAvgFactor(a.at("exponential_avg_factor").get<float>())
                   : r;
    };
    const auto grad_attrs = [](const json& a) {
        return tf::ops::FusedBatchNormGradV3::Epsilon(a.at("epsilon").get<float>())
            .DataFormat(a.at("data_format").get<std::string>())
            .IsTraining(a.at("is_training").get<bool>());
    };

    const json forward = load("forward.json");
    REQUIRE(forward.at("cases").size() > 50);
    for (const auto& c : forward.at("cases"))
    {
        INFO(c.at("name").get<std::string>());
        const auto& in = c.at("inputs");
        const tf::ops::FusedBatchNormV3 bn(scope, make_tensor(in.at("x")), make_tensor(in.at("scale")),
                                           make_tensor(in.at("offset")), make_tensor(in.at("mean")),
                                           make_tensor(in.at("variance")), forward_attrs(c.at("attrs")));
        const auto& out = c.at("outputs");
        check_output(bn.y, out.at("y"), "y");
        check_output(bn.batch_mean, out.at("batch_mean"), "batch_mean");
        check_output(bn.batch_variance, out.at("batch_variance"), "batch_variance");
        check_output(bn.reserve_space_1, out.at("reserve_space_1"), "reserve_space_1");
        check_output(bn.reserve_space_2, out.at("reserve_space_2"), "reserve_space_2");
    }

    for (const char* file : {"grad_v3.json", "grad_v2.json"})
    {
        const json data = load(file);
        const bool v2 = std::string(file) == "grad_v2.json";
        REQUIRE(data.at("cases").size() > 20);
        for (const auto& c : data.at("cases"))
        {
            INFO(c.at("name").get<std::string>());
            const auto& in = c.at("inputs");
            const auto& out = c.at("outputs");
            const tensor dy = make_tensor(in.at("y_backprop")), x = make_tensor(in.at("x")),
                         scale = make_tensor(in.at("scale")), rs1 = make_tensor(in.at("reserve_space_1")),
                         rs2 = make_tensor(in.at("reserve_space_2"));
            if (v2)
            {
                const tf::ops::FusedBatchNormGradV2 g(scope, dy, x, scale, rs1, rs2, grad_attrs(c.at("attrs")));
                check_output(g.x_backprop, out.at("x_backprop"), "x_backprop");
                check_output(g.scale_backprop, out.at("scale_backprop"), "scale_backprop");
                check_output(g.offset_backprop, out.at("offset_backprop"), "offset_backprop");
                check_output(g.reserve_space_3, out.at("reserve_space_3"), "reserve_space_3");
                check_output(g.reserve_space_4, out.at("reserve_space_4"), "reserve_space_4");
            }
            else
            {
                const tf::ops::FusedBatchNormGradV3 g(scope, dy, x, scale, rs1, rs2,
                                                      make_tensor(in.at("reserve_space_3")), grad_attrs(c.at("attrs")));
                check_output(g.x_backprop, out.at("x_backprop"), "x_backprop");
                check_output(g.scale_backprop, out.at("scale_backprop"), "scale_backprop");
                check_output(g.offset_backprop, out.at("offset_backprop"), "offset_backprop");
                check_output(g.reserve_space_4, out.at("reserve_space_4"), "reserve_space_4");
                check_output(g.reserve_space_5, out.at("reserve_space_5"), "reserve_space_5");
            }
        }
    }
}
