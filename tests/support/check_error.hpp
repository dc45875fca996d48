#pragma once
// CHECK_ERROR(expr, type, parts...): checks that expr throws `type` (or a subclass) and that
// the message contains every one of the string parts. Shared by the error tests.
#include <doctest/doctest.h>

#include <string>

#define CHECK_ERROR(expr, type, ...)                                                                                   \
    do                                                                                                                 \
    {                                                                                                                  \
        bool thrown = false;                                                                                           \
        try                                                                                                            \
        {                                                                                                              \
            (void)(expr);                                                                                              \
        }                                                                                                              \
        catch (const type& e)                                                                                          \
        {                                                                                                              \
            thrown = true;                                                                                             \
            const std::string msg = e.what();                                                                          \
            for (const char* part : {__VA_ARGS__})                                                                     \
                CHECK_MESSAGE(msg.find(part) != std::string::npos, "message '" << msg << "' lacks '" << part << "'");  \
        }                                                                                                              \
        CHECK_MESSAGE(thrown, #expr " did not throw " #type);                                                          \
    } while (0)
