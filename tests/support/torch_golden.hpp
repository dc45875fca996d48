#pragma once
// Reading the PyTorch golden data of tests/data/torch (made by tools/torch_golden/*.py; format
// in tests/data/torch/README.md), so that ops are checked against PyTorch's values with no
// Python at test time. A test target that includes this links nlohmann_json and defines
// XGRAD_TEST_DATA_DIR (tests/CMakeLists.txt's xgrad_add_test ... GOLDEN).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "xgrad/xgrad.hpp"

namespace torch_golden
{
    using json = nlohmann::json;

    /// The document of tests/data/torch/<file>.
    inline json load(const std::string& file)
    {
        const std::string path = std::string(XGRAD_TEST_DATA_DIR) + "/torch/" + file;
        std::ifstream in(path);
        REQUIRE_MESSAGE(in.good(), "cannot open " << path);
        return json::parse(in);
    }

    /// A stored tensor, float64 or int64, on the CPU.
    inline xgrad::tensor make_tensor(const json& t)
    {
        const auto shape = t.at("shape").get<xgrad::shape_type>();
        if (t.at("dtype") == "int64")
        {
            const auto values = t.at("data").get<std::vector<std::int64_t>>();
            return xgrad::from_host(values.data(), shape, xgrad::dtype::int64);
        }
        const auto values = t.at("data").get<std::vector<double>>();
        return xgrad::from_host(values.data(), shape, xgrad::dtype::float64);
    }

    /// The input NAME of a case.
    inline xgrad::tensor input(const json& c, const char* name) { return make_tensor(c.at("inputs").at(name)); }

    /// got (any floating dtype) against a stored tensor: the same shape, and
    /// max |got - want| <= tol * max(1, max |want|) over the tensor (a bound on the tensor's
    /// magnitude, not per element: tiny elements lose relative accuracy to cancellation in
    /// either framework, and each file argues its tol).
    inline void check_close(const xgrad::tensor& got, const json& want_json, double tol, const std::string& what)
    {
        INFO(what);
        const xgrad::tensor want = make_tensor(want_json);
        REQUIRE(got.shape() == want.shape());
        const std::vector<double> g = xgrad::to_vector(got);
        const std::vector<double> w = xgrad::to_vector(want);
        double scale = 1.0, err = 0.0;
        for (std::size_t i = 0; i < w.size(); ++i)
        {
            scale = std::max(scale, std::abs(w[i]));
            err = std::max(err, std::isnan(g[i]) != std::isnan(w[i]) ? HUGE_VAL
                                : std::isnan(w[i])                   ? 0.0
                                                                     : std::abs(g[i] - w[i]));
        }
        CHECK_MESSAGE(err <= tol * scale, "max |xgrad - torch| = " << err << " > " << tol << " * " << scale);
    }
}
