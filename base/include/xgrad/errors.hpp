#pragma once
// xgrad's exception types.
#include <stdexcept>

namespace xgrad
{
    /// Bad input that an op rejects before touching any data (shapes, dtypes, attributes).
    /// Derived from std::invalid_argument, so code catching that catches this too.
    class invalid_argument : public std::invalid_argument
    {
    public:
        using std::invalid_argument::invalid_argument;
    };
}
