# Writes every ```cpp block of a Markdown file into one C++ source, so that building it checks
# that the snippets compile as the document shows them (run by tests/docs/CMakeLists.txt at
# build time, whenever the document changes).
#
#   cmake -DDOC=<file.md> -DOUT=<snippets.cpp> -DMAIN=<main.cpp> -P extract_snippets.cmake
#
# The source includes nothing the snippets do not show: no header, using-declaration or
# namespace alias is added, so a snippet that relies on one must show it (or an earlier snippet
# must, as a reader following the text would have written it). main() is in a second file,
# MAIN, so that even its <cstdio> is not seen by the snippets. Each snippet is placed
# as the HTML comment on the line before its fence says (the comment does not show when the
# document is rendered):
#
#   <!-- snippet: namespace -->                 at namespace scope (definitions)
#   <!-- snippet: function(PARAMETERS) -->      as the body of a function taking PARAMETERS:
#                                               the names the snippet uses from the text around it
#   no comment                                  as the body of a function without parameters
#
# A #line directive before each snippet makes compiler errors point at the Markdown file.
if(NOT DOC OR NOT OUT OR NOT MAIN)
  message(FATAL_ERROR "extract_snippets.cmake: set DOC, OUT and MAIN")
endif()
file(STRINGS "${DOC}" lines)
set(source "// Generated from ${DOC} by tests/docs/extract_snippets.cmake: do not edit.\n")
set(in_block OFF)
set(placement "")
set(count 0)
set(line_number 0)
foreach(line IN LISTS lines)
  math(EXPR line_number "${line_number} + 1")
  if(in_block)
    if(line MATCHES "^```[ \t]*$")
      set(in_block OFF)
      if(NOT placement STREQUAL "namespace")
        string(APPEND source "}\n")
      endif()
      string(APPEND source "\n")
      set(placement "")
    else()
      string(APPEND source "${line}\n")
    endif()
  elseif(line MATCHES "^<!-- snippet: (.*) -->[ \t]*$")
    set(placement "${CMAKE_MATCH_1}")
  elseif(line MATCHES "^```cpp[ \t]*$")
    set(in_block ON)
    math(EXPR count "${count} + 1")
    math(EXPR first "${line_number} + 1")
    if(placement STREQUAL "namespace")
      string(APPEND source "#line ${first} \"${DOC}\"\n")
    else()
      set(parameters "")
      if(placement MATCHES "^function\\((.*)\\)$")
        set(parameters "${CMAKE_MATCH_1}")
      elseif(NOT placement STREQUAL "")
        message(FATAL_ERROR "${DOC}:${line_number}: unknown snippet placement '${placement}' "
                            "(expected 'namespace' or 'function(PARAMETERS)')")
      endif()
      string(APPEND source "[[maybe_unused]] static void snippet_${count}(${parameters})\n{\n#line ${first} \"${DOC}\"\n")
    endif()
  else()
    set(placement "")
  endif()
endforeach()
if(in_block)
  message(FATAL_ERROR "${DOC}: a ```cpp block is not closed")
endif()
set(main "// Generated from ${DOC} by tests/docs/extract_snippets.cmake: do not edit.\n#include <cstdio>\n\n")
string(APPEND main "int main()\n{\n    std::printf(\"${count} snippets of ${DOC} compiled\\n\");\n    return ${count} > 0 ? 0 : 1;\n}\n")
foreach(pair "OUT;source" "MAIN;main")
  list(GET pair 0 file_var)
  list(GET pair 1 text_var)
  file(WRITE "${${file_var}}.tmp" "${${text_var}}")
  file(COPY_FILE "${${file_var}}.tmp" "${${file_var}}" ONLY_IF_DIFFERENT)
  file(REMOVE "${${file_var}}.tmp")
endforeach()
