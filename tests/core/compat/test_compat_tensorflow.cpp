// The TensorFlow compatibility layer (xgrad/compat/tensorflow.hpp): every class compiles with
// TensorFlow's signatures, the Attrs chain and hold the contract's defaults, the outputs are those
// of the core free functions bit for bit (and TensorFlow's empty outputs are [0]), the errors
// are the core functions' in TensorFlow's words (plus the scope's device check), and the scope
// decides recording and device.
#include <doctest/doctest.h>

#include <cctype>
#include <cstring>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "tests/support/batch_norm_api_helpers.hpp"
#include "xgrad/compat/tensorflow.hpp"
#include "xgrad/xgrad.hpp"

using namespace xgrad;
namespace tf = xgrad::compat::tensorflow;
using namespace bn_api_test;

namespace
{
    /// One of TensorFlow's empty outputs: [0], x's statistics dtype, x's device.
    void check_empty_output(const tensor& t, const tensor& x, const char* what)
    {
        INFO(what);
        REQUIRE(t.defined());
        CHECK(t.shape() == shape_type{0});
        CHECK(t.dtype() == (x.dtype() == dtype::float64 ? dtype::float64 : dtype::float32));
        CHECK(t.device() == x.device());
    }

    /// The inputs with x and dy in `dt` and the per-channel tensors in its statistics dtype.
    bn_inputs with_dtype(const bn_inputs& in, dtype dt)
    {
        const dtype sdt = dt == dtype::float64 ? dtype::float64 : dtype::float32;
        return {in.x.to(dt), in.dy.to(dt), in.scale.to(sdt), in.offset.to(sdt), in.mean.to(sdt), in.variance.to(sdt)};
    }

    /// The message of the xgrad::invalid_argument that `f` throws ("" when it throws none).
    std::string error_of(const std::function<void()>& f)
    {
        try
        {
            f();
        }
        catch (const xgrad::invalid_argument& e)
        {
            return e.what();
        }
        return "";
    }

    /// A core function's message with the TensorFlow op's name for the function's and
    /// TensorFlow's argument names for xgrad's: what the compatibility class says.
    std::string in_tensorflow_words(std::string msg, const std::string& function, const std::string& op)
    {
        const auto replace_words = [&](const std::string& from, const std::string& to) {
            for (std::size_t at = msg.find(from); at != std::string::npos; at = msg.find(from, at + to.size()))
            {
                const bool starts = at == 0 ||
                                    !(std::isalnum(static_cast<unsigned char>(msg[at - 1])) || msg[at - 1] == '_');
                const std::size_t end = at + from.size();
                const bool ends = end == msg.size() ||
                                  !(std::isalnum(static_cast<unsigned char>(msg[end])) || msg[end] == '_');
                if (starts && ends)
                    msg.replace(at, from.size(), to);
            }
        };
        replace_words(function, op);
        replace_words("dy", "y_backprop");
        replace_words("saved_mean", "reserve_space_1");
        replace_words("saved_var", "reserve_space_2");
        return msg;
    }

    /// The forward's outputs against the core function's, under TensorFlow's names.
    void check_forward(const tf::ops::FusedBatchNormV3& bn, const batch_norm_forward_result& ref)
    {
        check_same_bits(bn.y, ref.y, "y");
        check_same_bits(bn.batch_mean, ref.running_mean, "batch_mean");
        check_same_bits(bn.batch_variance, ref.running_var, "batch_variance");
        check_same_bits(bn.reserve_space_1, ref.saved_mean, "reserve_space_1");
        check_same_bits(bn.reserve_space_2, ref.saved_var, "reserve_space_2");
        check_empty_output(bn.reserve_space_3, bn.y, "reserve_space_3");
    }

    /// A gradient class's outputs against the core function's.
    template <class G>
    void check_grad(const G& g, const batch_norm_grad_result& ref, const std::string& what)
    {
        INFO(what);
        check_same_bits(g.x_backprop, ref.dx, "x_backprop");
        check_same_bits(g.scale_backprop, ref.dscale, "scale_backprop");
        check_same_bits(g.offset_backprop, ref.doffset, "offset_backprop");
    }
}

TEST_CASE("Scope: the root scope is CPU with recording on; With* return modified copies")
{
    const tf::Scope root = tf::Scope::NewRootScope();
    CHECK(root.device() == cpu_device);
    CHECK(root.records_gradients());

    const tf::Scope quiet = root.WithGradientRecording(false);
    CHECK_FALSE(quiet.records_gradients());
    CHECK(quiet.device() == cpu_device);
    CHECK(root.records_gradients()); // the original is unchanged
    CHECK(quiet.WithGradientRecording(true).records_gradients());

    const tf::Scope cpu = root.WithDevice(cpu_device).WithGradientRecording(true);
    CHECK(cpu.device() == cpu_device);
    CHECK(cpu.records_gradients());
    CHECK(root.WithDevice("cpu").device() == cpu_device);

    const tf::Scope gpu = root.WithDevice(device{device_type::cuda, 1});
    CHECK(gpu.device() == device{device_type::cuda, 1});
    CHECK(root.device() == cpu_device);
    CHECK(root.WithDevice("cuda:1").device() == gpu.device());
    CHECK(gpu.WithGradientRecording(false).device() == gpu.device()); // one setting at a time

    // TensorFlow's own device names, as ported code spells them.
    CHECK(root.WithDevice("/device:CPU:0").device() == cpu_device);
    CHECK(root.WithDevice("/cpu:0").device() == cpu_device);
    CHECK(root.WithDevice("/device:GPU:1").device() == gpu.device());
    CHECK(root.WithDevice("/gpu:1").device() == gpu.device());
    CHECK(root.WithDevice("/job:localhost/replica:0/task:0/device:GPU:0").device() == device{device_type::cuda, 0});
}

TEST_CASE("Scope: a device text that names no device is rejected, naming the text")
{
    const tf::Scope root = tf::Scope::NewRootScope();
    for (const char* text : {"tpu", "cuda:x", "", "/device:TPU:0", "/device:CPU:1", "/device:GPU", "/device:GPU:x",
                             "/device:GPU:0/job:a", "/job:localhost"})
    {
        CAPTURE(text);
        bool thrown = false;
        try
        {
            (void)root.WithDevice(text);
        }
        catch (const std::invalid_argument& e)
        {
            thrown = true;
            if (*text != '\0')
                CHECK(std::string(e.what()).find(text) != std::string::npos);
        }
        CHECK(thrown);
    }
}

TEST_CASE("Attrs: the contract's defaults, equal to batch_norm_attrs'")
{
    const batch_norm_attrs d;
    const tf::ops::FusedBatchNormV3::Attrs f;
    CHECK(f.epsilon_ == 0.0001f);
    CHECK(f.data_format_ == "NHWC");
    CHECK(f.is_training_);
    CHECK(f.exponential_avg_factor_ == 1.0f);
    CHECK(f.epsilon_ == d.epsilon);
    CHECK(f.data_format_ == d.data_format);
    CHECK(f.is_training_ == d.is_training);
    CHECK(f.exponential_avg_factor_ == d.exponential_avg_factor);

    const tf::ops::FusedBatchNormGradV3::Attrs g3;
    CHECK(g3.epsilon_ == d.epsilon);
    CHECK(g3.data_format_ == d.data_format);
    CHECK(g3.is_training_ == d.is_training);
    const tf::ops::FusedBatchNormGradV2::Attrs g2;
    CHECK(g2.epsilon_ == d.epsilon);
    CHECK(g2.data_format_ == d.data_format);
    CHECK(g2.is_training_ == d.is_training);
    // The two gradient ops take the same three attributes, so they share one Attrs type.
    static_assert(std::is_same_v<tf::ops::FusedBatchNormGradV3::Attrs, tf::ops::FusedBatchNormGradV2::Attrs>);
}

TEST_CASE("Attrs: setters return modified copies and chain, from Attrs() and from the static setters")
{
    using tf::ops::FusedBatchNormGradV2;
    using tf::ops::FusedBatchNormGradV3;
    using tf::ops::FusedBatchNormV3;

    const FusedBatchNormGradV3::Attrs base;
    const auto a = base.Epsilon(1e-3f).IsTraining(false);
    CHECK(a.epsilon_ == 1e-3f);
    CHECK_FALSE(a.is_training_);
    CHECK(a.data_format_ == "NHWC");
    CHECK(base.epsilon_ == 0.0001f); // unchanged
    CHECK(base.is_training_);

    const auto b = FusedBatchNormGradV3::Epsilon(1e-3f).DataFormat("NCDHW").IsTraining(false);
    CHECK(b.epsilon_ == 1e-3f);
    CHECK(b.data_format_ == "NCDHW");
    CHECK_FALSE(b.is_training_);
    CHECK(FusedBatchNormGradV3::DataFormat("NCHW").data_format_ == "NCHW");
    CHECK_FALSE(FusedBatchNormGradV3::IsTraining(false).is_training_);
    // A later setter of the same attribute wins.
    CHECK(FusedBatchNormGradV3::Epsilon(1e-3f).Epsilon(5e-2f).epsilon_ == 5e-2f);

    const FusedBatchNormV3::Attrs fbase;
    const auto f = fbase.ExponentialAvgFactor(0.6f).Epsilon(2e-3f).DataFormat("NCHW").IsTraining(true);
    CHECK(f.exponential_avg_factor_ == 0.6f);
    CHECK(f.epsilon_ == 2e-3f);
    CHECK(f.data_format_ == "NCHW");
    CHECK(f.is_training_);
    CHECK(fbase.exponential_avg_factor_ == 1.0f); // unchanged
    CHECK(fbase.data_format_ == "NHWC");
    const auto f2 = FusedBatchNormV3::Attrs().IsTraining(false).ExponentialAvgFactor(0.25f);
    CHECK_FALSE(f2.is_training_);
    CHECK(f2.exponential_avg_factor_ == 0.25f);
    CHECK(FusedBatchNormV3::Epsilon(1e-5f).epsilon_ == 1e-5f);
    CHECK(FusedBatchNormV3::DataFormat("NDHWC").data_format_ == "NDHWC");
    CHECK_FALSE(FusedBatchNormV3::IsTraining(false).is_training_);
    CHECK(FusedBatchNormV3::ExponentialAvgFactor(0.5f).exponential_avg_factor_ == 0.5f);

    const std::string fmt = "NCHW"; // any string_view source
    const auto g = FusedBatchNormGradV2::DataFormat(fmt).Epsilon(1e-2f).IsTraining(false);
    CHECK(g.data_format_ == "NCHW");
    CHECK(g.epsilon_ == 1e-2f);
    CHECK_FALSE(g.is_training_);
    CHECK(FusedBatchNormGradV2::Attrs().DataFormat("NHWC").data_format_ == "NHWC");
    CHECK(FusedBatchNormGradV2::Epsilon(3e-3f).epsilon_ == 3e-3f);
    CHECK_FALSE(FusedBatchNormGradV2::IsTraining(false).is_training_);
}

TEST_CASE("the classes without Attrs equal the core functions with default attributes, bit for bit")
{
    const tf::Scope scope = tf::Scope::NewRootScope();
    const bn_inputs in = make_inputs({2, 3, 4, 5}, 5, 11); // NHWC, C = 5
    const tensor none = zeros({0});

    const tf::ops::FusedBatchNormV3 bn(scope, in.x, in.scale, in.offset, none, none);
    const batch_norm_forward_result ref = fused_batch_norm(in.x, in.scale, in.offset, none, none);
    check_same_bits(bn.y, ref.y, "y");
    check_forward(bn, ref);

    const tf::ops::FusedBatchNormGradV3 g3(scope, in.dy, in.x, in.scale, bn.reserve_space_1, bn.reserve_space_2,
                                           bn.reserve_space_3);
    const batch_norm_grad_result r3 = fused_batch_norm_grad(in.dy, in.x, in.scale, ref.saved_mean, ref.saved_var);
    check_grad(g3, r3, "V3");
    check_empty_output(g3.reserve_space_4, in.x, "V3 reserve_space_4");
    check_empty_output(g3.reserve_space_5, in.x, "V3 reserve_space_5");

    const tf::ops::FusedBatchNormGradV2 g2(scope, in.dy, in.x, in.scale, bn.reserve_space_1, bn.reserve_space_2);
    check_grad(g2, r3, "V2");
    check_empty_output(g2.reserve_space_3, in.x, "V2 reserve_space_3");
    check_empty_output(g2.reserve_space_4, in.x, "V2 reserve_space_4");
}

TEST_CASE("the classes with Attrs equal the core functions with the same attributes, bit for bit, in every dtype")
{
    const tf::Scope scope = tf::Scope::NewRootScope();
    for (const dtype dt : {dtype::float32, dtype::float64, dtype::float16, dtype::bfloat16})
        for (const bool training : {true, false})
        {
            CAPTURE(dt);
            CAPTURE(training);
            const bn_inputs in = with_dtype(make_inputs({3, 4, 5, 2}, 4, 23), dt); // NCHW, C = 4
            const float eps = 1e-3f, factor = 0.6f;

            const auto fa = tf::ops::FusedBatchNormV3::DataFormat("NCHW").Epsilon(eps).IsTraining(training);
            const tf::ops::FusedBatchNormV3 bn(scope, in.x, in.scale, in.offset, in.mean, in.variance,
                                               fa.ExponentialAvgFactor(factor));
            const batch_norm_forward_result ref = fused_batch_norm(in.x, in.scale, in.offset, in.mean, in.variance,
                                                                   make_attrs("NCHW", training, eps, factor));
            check_same_bits(bn.y, ref.y, "y");
            check_forward(bn, ref);

            const batch_norm_attrs ga = make_attrs("NCHW", training, eps);
            const auto g3a = tf::ops::FusedBatchNormGradV3::Attrs().Epsilon(eps).IsTraining(training);
            const tf::ops::FusedBatchNormGradV3 g3(scope, in.dy, in.x, in.scale, bn.reserve_space_1, bn.reserve_space_2,
                                                   bn.reserve_space_3, g3a.DataFormat("NCHW"));
            const batch_norm_grad_result r3 = fused_batch_norm_grad(in.dy, in.x, in.scale, ref.saved_mean,
                                                                    ref.saved_var, ga);
            check_grad(g3, r3, "V3");
            check_empty_output(g3.reserve_space_4, in.x, "V3 reserve_space_4");
            check_empty_output(g3.reserve_space_5, in.x, "V3 reserve_space_5");

            const auto g2a = tf::ops::FusedBatchNormGradV2::Epsilon(eps).DataFormat("NCHW").IsTraining(training);
            const tf::ops::FusedBatchNormGradV2 g2(scope, in.dy, in.x, in.scale, bn.reserve_space_1, bn.reserve_space_2,
                                                   g2a);
            check_grad(g2, r3, "V2");
            check_empty_output(g2.reserve_space_3, in.x, "V2 reserve_space_3");
            check_empty_output(g2.reserve_space_4, in.x, "V2 reserve_space_4");
        }
}

TEST_CASE("5-D layouts go through FusedBatchNormV3 and FusedBatchNormGradV3")
{
    const tf::Scope scope = tf::Scope::NewRootScope();
    for (const char* format : {"NCDHW", "NDHWC"})
    {
        CAPTURE(format);
        const bool channels_first = std::string(format) == "NCDHW";
        const bn_inputs in = make_inputs(channels_first ? shape_type{2, 3, 2, 2, 2} : shape_type{2, 2, 2, 2, 3}, 3,
                                         5); // C = 3
        const tf::ops::FusedBatchNormV3 bn(scope, in.x, in.scale, in.offset, in.mean, in.variance,
                                           tf::ops::FusedBatchNormV3::DataFormat(format));
        const batch_norm_forward_result ref = fused_batch_norm(in.x, in.scale, in.offset, in.mean, in.variance,
                                                               make_attrs(format, true, 0.0001f));
        check_same_bits(bn.y, ref.y, "y");
        const tf::ops::FusedBatchNormGradV3 g(scope, in.dy, in.x, in.scale, bn.reserve_space_1, bn.reserve_space_2,
                                              bn.reserve_space_3, tf::ops::FusedBatchNormGradV3::DataFormat(format));
        const batch_norm_grad_result r = fused_batch_norm_grad(in.dy, in.x, in.scale, ref.saved_mean, ref.saved_var,
                                                               make_attrs(format, true, 0.0001f));
        check_grad(g, r, format);
    }
}

TEST_CASE("errors: the core functions' messages in TensorFlow's words, as xgrad::invalid_argument")
{
    const tf::Scope scope = tf::Scope::NewRootScope();
    const tensor x5 = zeros({1, 2, 2, 2, 3}), c = ones({3});

    // FusedBatchNormGradV2 rejects the 5-D formats that V3 (and fused_batch_norm_grad) accept.
    for (const char* format : {"NDHWC", "NCDHW"})
    {
        CAPTURE(format);
        const auto v2 = tf::ops::FusedBatchNormGradV2::DataFormat(format);
        const std::string msg = error_of([&] { tf::ops::FusedBatchNormGradV2(scope, x5, x5, c, c, c, v2); });
        CHECK(msg.find("FusedBatchNormGradV2: unsupported data_format") != std::string::npos);
        CHECK(msg.find(format) != std::string::npos);
        CHECK(msg.find("NHWC or NCHW") != std::string::npos);
    }
    // The same input is fine for V3.
    CHECK_NOTHROW(tf::ops::FusedBatchNormGradV3(scope, x5, x5, c, c, zeros({3}), zeros({0}),
                                                tf::ops::FusedBatchNormGradV3::DataFormat("NDHWC")));

    // Each class runs the core function's checks: its message is the core function's with the
    // TensorFlow op's name and argument names in place of xgrad's.
    const std::string rank = error_of([&] { tf::ops::FusedBatchNormV3(scope, zeros({2, 3}), c, c, c, c); });
    CHECK(rank.find("[2, 3]") != std::string::npos);
    CHECK(rank == in_tensorflow_words(error_of([&] {
                                          fused_batch_norm(zeros({2, 3}), c, c, c, c);
                                      }),
                                      "fused_batch_norm", "FusedBatchNormV3"));

    const std::string nhwc5 = error_of([&] { tf::ops::FusedBatchNormGradV3(scope, x5, x5, c, c, c, c); });
    CHECK(nhwc5.find("NHWC") != std::string::npos);
    CHECK(nhwc5 == in_tensorflow_words(error_of([&] { fused_batch_norm_grad(x5, x5, c, c, c); }),
                                       "fused_batch_norm_grad", "FusedBatchNormGradV3"));

    const auto bad_eps = tf::ops::FusedBatchNormGradV3::Epsilon(-1e-3f);
    const tensor x4 = zeros({1, 2, 2, 3});
    const std::string eps = error_of([&] { tf::ops::FusedBatchNormGradV3(scope, x4, x4, c, c, c, c, bad_eps); });
    CHECK(eps.find("epsilon") != std::string::npos);
    batch_norm_attrs ea;
    ea.epsilon = -1e-3f;
    CHECK(eps == in_tensorflow_words(error_of([&] { fused_batch_norm_grad(x4, x4, c, c, c, ea); }),
                                     "fused_batch_norm_grad", "FusedBatchNormGradV3"));

    const auto bad_factor = tf::ops::FusedBatchNormV3::ExponentialAvgFactor(1.5f);
    const std::string factor = error_of([&] { tf::ops::FusedBatchNormV3(scope, x4, c, c, c, c, bad_factor); });
    CHECK(factor.find("exponential_avg_factor") != std::string::npos);
    batch_norm_attrs fa;
    fa.exponential_avg_factor = 1.5f;
    CHECK(factor == in_tensorflow_words(error_of([&] { fused_batch_norm(x4, c, c, c, c, fa); }), "fused_batch_norm",
                                        "FusedBatchNormV3"));

    // The reserve spaces' and y_backprop's own names: a saved statistic of the wrong length,
    // and a y_backprop of another shape.
    const std::string rs1 = error_of([&] { tf::ops::FusedBatchNormGradV3(scope, x4, x4, c, ones({4}), c, c); });
    CHECK(rs1.find("FusedBatchNormGradV3: reserve_space_1") != std::string::npos);
    CHECK(rs1 == in_tensorflow_words(error_of([&] { fused_batch_norm_grad(x4, x4, c, ones({4}), c); }),
                                     "fused_batch_norm_grad", "FusedBatchNormGradV3"));
    const std::string dy = error_of([&] { tf::ops::FusedBatchNormGradV3(scope, zeros({1, 2, 2, 4}), x4, c, c, c, c); });
    CHECK(dy.find("x and y_backprop must have same shape") != std::string::npos);

    // NCHW: C = 2, so a scale of length 4 is wrong while the reserve spaces are right.
    const auto v2 = tf::ops::FusedBatchNormGradV2::DataFormat("NCHW");
    const tensor c2 = ones({2}), c4 = ones({4});
    const std::string scale = error_of([&] { tf::ops::FusedBatchNormGradV2(scope, x4, x4, c4, c2, c2, v2); });
    CHECK(scale.find("scale") != std::string::npos);
    batch_norm_attrs sa;
    sa.data_format = "NCHW";
    CHECK(scale == in_tensorflow_words(error_of([&] { fused_batch_norm_grad(x4, x4, c4, c2, c2, sa); }),
                                       "fused_batch_norm_grad", "FusedBatchNormGradV2"));
}

TEST_CASE("an input off the scope's device is rejected, naming the op, the input and both devices")
{
    // The scope's device is only a tag: a CUDA scope with CPU inputs fails the check before
    // anything runs, so this needs no CUDA build.
    const tf::Scope gpu = tf::Scope::NewRootScope().WithDevice(device{device_type::cuda, 0});
    const bn_inputs in = make_inputs({1, 2, 2, 3}, 3, 3);
    const tensor u; // undefined
    const auto expect = [](const char* op, const char* input) {
        return std::string(op) + ": " + input + " is on cpu but the scope's device is cuda:0";
    };
    CHECK(error_of([&] { tf::ops::FusedBatchNormV3(gpu, in.x, in.scale, in.offset, in.mean, in.variance); }) ==
          expect("FusedBatchNormV3", "x"));
    CHECK(error_of([&] { tf::ops::FusedBatchNormGradV3(gpu, in.dy, in.x, in.scale, in.mean, in.variance, u); }) ==
          expect("FusedBatchNormGradV3", "y_backprop"));
    CHECK(error_of([&] { tf::ops::FusedBatchNormGradV2(gpu, in.dy, in.x, in.scale, in.mean, in.variance); }) ==
          expect("FusedBatchNormGradV2", "y_backprop"));

    // Every input is checked. Undefined inputs are skipped by the scope's check, so leaving the
    // ones before it undefined makes the check reach each input in turn (the core function,
    // which would reject the undefined ones, is never reached).
    CHECK(error_of([&] { tf::ops::FusedBatchNormV3(gpu, u, in.scale, in.offset, in.mean, in.variance); }) ==
          expect("FusedBatchNormV3", "scale"));
    CHECK(error_of([&] { tf::ops::FusedBatchNormV3(gpu, u, u, in.offset, in.mean, in.variance); }) ==
          expect("FusedBatchNormV3", "offset"));
    CHECK(error_of([&] { tf::ops::FusedBatchNormV3(gpu, u, u, u, in.mean, in.variance); }) ==
          expect("FusedBatchNormV3", "mean"));
    CHECK(error_of([&] { tf::ops::FusedBatchNormV3(gpu, u, u, u, u, in.variance); }) ==
          expect("FusedBatchNormV3", "variance"));
    const char* grad_inputs[] = {"y_backprop", "x", "scale", "reserve_space_1", "reserve_space_2", "reserve_space_3"};
    for (int k = 0; k < 6; ++k)
    {
        CAPTURE(k);
        std::vector<tensor> a = {in.dy, in.x, in.scale, in.mean, in.variance, zeros({0})};
        for (int j = 0; j < k; ++j)
            a[static_cast<std::size_t>(j)] = u;
        CHECK(error_of([&] { tf::ops::FusedBatchNormGradV3(gpu, a[0], a[1], a[2], a[3], a[4], a[5]); }) ==
              expect("FusedBatchNormGradV3", grad_inputs[k]));
        if (k < 5)
            CHECK(error_of([&] { tf::ops::FusedBatchNormGradV2(gpu, a[0], a[1], a[2], a[3], a[4]); }) ==
                  expect("FusedBatchNormGradV2", grad_inputs[k]));
    }

    // The scope's check comes before the core function's own: a bad shape on the wrong device
    // reports the device.
    CHECK(error_of([&] {
              tf::ops::FusedBatchNormV3(gpu, zeros({2, 3}), in.scale, in.offset, in.mean, in.variance);
          }) == expect("FusedBatchNormV3", "x"));

    // An undefined optional input is not checked: GradV3's reserve_space_3 may be left out.
    const tf::Scope cpu = gpu.WithDevice("cpu");
    CHECK_NOTHROW(tf::ops::FusedBatchNormGradV3(cpu, in.dy, in.x, in.scale, in.mean, in.variance, tensor()));

    // The same inputs under a CPU scope (explicitly chosen, or the default) run.
    CHECK_NOTHROW(tf::ops::FusedBatchNormV3(tf::Scope::NewRootScope().WithDevice(cpu_device), in.x, in.scale, in.offset,
                                            in.mean, in.variance));
    CHECK_NOTHROW(
        tf::ops::FusedBatchNormV3(tf::Scope::NewRootScope(), in.x, in.scale, in.offset, in.mean, in.variance));
}

TEST_CASE("the scope decides gradient recording, and the thread's grad mode is restored")
{
    const tf::Scope root = tf::Scope::NewRootScope();
    bn_inputs in = make_inputs({2, 2, 3, 3}, 3, 7);
    in.x.requires_grad_();
    in.scale.requires_grad_();
    in.offset.requires_grad_();
    in.dy.requires_grad_();
    const tensor none = zeros({0});

    SUBCASE("recording off: no output requires grad")
    {
        const tf::Scope quiet = root.WithGradientRecording(false);
        const tf::ops::FusedBatchNormV3 bn(quiet, in.x, in.scale, in.offset, none, none);
        CHECK_FALSE(bn.y.requires_grad());
        CHECK_FALSE(bn.batch_mean.requires_grad());
        const tf::ops::FusedBatchNormGradV3 g3(quiet, in.dy, in.x, in.scale, bn.reserve_space_1, bn.reserve_space_2,
                                               bn.reserve_space_3);
        CHECK_FALSE(g3.x_backprop.requires_grad());
        CHECK_FALSE(g3.scale_backprop.requires_grad());
        CHECK_FALSE(g3.offset_backprop.requires_grad());
        const tf::ops::FusedBatchNormGradV2 g2(quiet, in.dy, in.x, in.scale, bn.reserve_space_1, bn.reserve_space_2);
        CHECK_FALSE(g2.x_backprop.requires_grad());
        CHECK(is_grad_enabled()); // restored
    }
    SUBCASE("recording on: y and the gradients are differentiable, even inside no_grad")
    {
        no_grad outer;
        const tf::ops::FusedBatchNormV3 bn(root, in.x, in.scale, in.offset, none, none);
        CHECK(bn.y.requires_grad());
        CHECK_FALSE(bn.batch_mean.requires_grad()); // statistics are not differentiable outputs
        CHECK_FALSE(bn.reserve_space_1.requires_grad());
        const tf::ops::FusedBatchNormGradV3 g3(root, in.dy, in.x, in.scale, bn.reserve_space_1, bn.reserve_space_2,
                                               bn.reserve_space_3);
        CHECK(g3.x_backprop.requires_grad());
        CHECK(g3.scale_backprop.requires_grad());
        CHECK(g3.offset_backprop.requires_grad());
        const tf::ops::FusedBatchNormGradV2 g2(root, in.dy, in.x, in.scale, bn.reserve_space_1, bn.reserve_space_2);
        CHECK(g2.x_backprop.requires_grad());
        CHECK_FALSE(is_grad_enabled()); // restored to the no_grad of the caller
    }
    SUBCASE("the mode is restored when the op throws")
    {
        const tf::Scope quiet = root.WithGradientRecording(false);
        CHECK_THROWS_AS(tf::ops::FusedBatchNormV3(quiet, zeros({2, 3}), in.scale, in.offset, none, none),
                        xgrad::invalid_argument);
        CHECK(is_grad_enabled());
    }
}

TEST_CASE("the gradient class agrees with autograd through the forward class, and differentiates again")
{
    const tf::Scope scope = tf::Scope::NewRootScope();
    for (const bool training : {true, false})
    {
        CAPTURE(training);
        bn_inputs in = make_inputs({2, 3, 2, 2}, 3, 31); // NCHW
        in.x.requires_grad_();
        const auto fa = tf::ops::FusedBatchNormV3::DataFormat("NCHW").IsTraining(training);
        const auto ga = tf::ops::FusedBatchNormGradV3::DataFormat("NCHW").IsTraining(training);

        const tf::ops::FusedBatchNormV3 bn(scope, in.x, in.scale, in.offset, in.mean, in.variance, fa);
        const tf::ops::FusedBatchNormGradV3 g(scope, in.dy, in.x, in.scale, bn.reserve_space_1, bn.reserve_space_2,
                                              bn.reserve_space_3, ga);
        // The forward's backward runs the same gradient op: the same bits.
        const tensor xb = grad({bn.y}, {in.x}, {in.dy}, std::nullopt, /*create_graph=*/true)[0];
        check_same_bits(g.x_backprop, xb, "x_backprop vs autograd");

        // Second order: d/dx sum(x_backprop^2), through the grad op and through double backward.
        const tensor second = grad({sum(square(g.x_backprop))}, {in.x})[0];
        const tensor second_ref = grad({sum(square(xb))}, {in.x})[0];
        const std::vector<double> s = to_vector(second), sr = to_vector(second_ref);
        REQUIRE(s.size() == sr.size());
        for (std::size_t i = 0; i < s.size(); ++i)
            CHECK(s[i] == doctest::Approx(sr[i]).epsilon(1e-5));
    }
}
