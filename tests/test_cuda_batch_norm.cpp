// Cross-backend tests: to be written (issue 6).
#include "tests/cuda_test_helpers.hpp"
