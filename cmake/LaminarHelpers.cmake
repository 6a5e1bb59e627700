# laminar_library(NAME SOURCES ... DEPS ...): one library per folder with the project's warnings.
function(laminar_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_compile_options(${name} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${LAMINAR_WARNINGS}>)
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
endfunction()

# laminar_slow_test_filter(OUT): the gtest filter (patterns joined by ':') of the slow tests listed
# in tests/slow_tests.txt, one pattern a line, '#' starting a comment.
function(laminar_slow_test_filter out)
  file(STRINGS "${PROJECT_SOURCE_DIR}/tests/slow_tests.txt" lines)
  set(patterns "")
  foreach(line IN LISTS lines)
    string(REGEX REPLACE "#.*" "" line "${line}")
    string(STRIP "${line}" line)
    if(line)
      list(APPEND patterns "${line}")
    endif()
  endforeach()
  list(JOIN patterns ":" joined)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
               "${PROJECT_SOURCE_DIR}/tests/slow_tests.txt")
  set(${out} "${joined}" PARENT_SCOPE)
endfunction()

# laminar_test(NAME LABEL l SOURCES ... DEPS ...): one GoogleTest binary; each test is a CTest test
# carrying the label (unit, integration, e2e, gpu).
function(laminar_test name)
  cmake_parse_arguments(ARG "" "LABEL" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_compile_options(${name} PRIVATE ${LAMINAR_WARNINGS})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  target_compile_definitions(${name} PRIVATE
      LAMINAR_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
      LAMINAR_BINARY_DIR="${PROJECT_BINARY_DIR}")
  # UCX's memory hooks (libucm intercepts madvise/mmap) crash ThreadSanitizer at thread exit; they
  # are read from the environment when libucs loads, so only the environment can turn them off.
  set(env "")
  if(LAMINAR_SANITIZE STREQUAL "thread")
    set(env ENVIRONMENT
        "UCX_MEM_EVENTS=no;TSAN_OPTIONS=halt_on_error=1 suppressions=${PROJECT_SOURCE_DIR}/tests/tsan.supp")
  endif()
  include(GoogleTest)
  # Tests over ~5 s (tests/slow_tests.txt) also carry the label `slow`: scripts/test.sh --fast
  # leaves them out. Each test is discovered once, by one of the two complementary filters.
  laminar_slow_test_filter(slow)
  gtest_discover_tests(${name} TEST_FILTER "-${slow}" DISCOVERY_MODE PRE_TEST
                       PROPERTIES LABELS ${ARG_LABEL} ${env} DISCOVERY_TIMEOUT 60)
  gtest_discover_tests(${name} TEST_FILTER "${slow}" DISCOVERY_MODE PRE_TEST
                       TEST_LIST ${name}_SLOW_TESTS
                       PROPERTIES LABELS ${ARG_LABEL} ${env} DISCOVERY_TIMEOUT 60)
  # gtest_discover_tests writes properties space-separated, so a list of labels cannot pass
  # through it: the slow ones get both labels here, after discovery has listed them.
  set(labels_file "${CMAKE_CURRENT_BINARY_DIR}/${name}_slow_labels.cmake")
  # The tests on the machine's one network-namespace cluster (scripts/netns_cluster.sh) run one at
  # a time, each with a timeout of its own that covers its waits. The chaos run judges stragglers
  # and hangs by timing: it never shares the machine with a whole cluster's job either.
  file(WRITE "${labels_file}"
       "foreach(t IN LISTS ${name}_SLOW_TESTS)\n"
       "  set_tests_properties(\"\${t}\" PROPERTIES LABELS \"${ARG_LABEL};slow\")\n"
       "  if(t MATCHES \"^SlurmClusterTest\\\\.\")\n"
       "    set_tests_properties(\"\${t}\" PROPERTIES RESOURCE_LOCK netns_cluster TIMEOUT 900)\n"
       "  elseif(t MATCHES \"^ChaosCliTest\\\\.\")\n"
       "    set_tests_properties(\"\${t}\" PROPERTIES RESOURCE_LOCK netns_cluster)\n"
       "  endif()\n"
       "endforeach()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${labels_file}")
endfunction()

# laminar_hot_path(TARGET): the libraries that run the model (kernels, engine, trainer) build at -O3
# in optimized builds. GCC's -O2 only vectorizes loops whose trip count it knows
# (-fvect-cost-model=very-cheap), which leaves element-wise loops over a row scalar. Without
# -ffast-math GCC never reorders a floating-point sum, but -O3 may restructure a loop so that
# results depend on how a call splits its work: kernels whose bits must not (vec_ops_*.cc) stay at
# -O2 (kernels/CMakeLists.txt).
function(laminar_hot_path name)
  target_compile_options(${name} PRIVATE $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<NOT:$<CONFIG:Debug>>>:-O3>)
endfunction()
