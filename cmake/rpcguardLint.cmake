# rpcguard_lint_test: checks the retry declarations of .proto files with
# CTest. Loaded by find_package(rpcguard); call enable_testing() first.
#
#   rpcguard_lint_test(NAME ledger_lint PROTOS ledger.proto STRICT
#                      [CONFIG service_config.json] [IMPORT_DIRS dir...])
#
# Makes ${NAME}.pb, a FileDescriptorSet of PROTOS and their imports with
# source info (protoc --include_imports --include_source_info; imports
# resolve from the current source directory, IMPORT_DIRS, RPCGUARD_PROTO_DIR
# and Protobuf's include directory), at build time, and adds the test NAME,
# which runs rpcguard_lint on it: it prints every RPC's policy and the source
# that decided it, and with STRICT fails when a unary RPC has no idempotency
# declaration from any source or a declaration is malformed. CONFIG is a
# JSON config (Config::FromJson's format) applied on top of the .proto
# options.
function(rpcguard_lint_test)
  cmake_parse_arguments(PARSE_ARGV 0 _rl "STRICT" "NAME;CONFIG"
                        "PROTOS;IMPORT_DIRS")
  if(NOT _rl_NAME OR NOT _rl_PROTOS)
    message(FATAL_ERROR "rpcguard_lint_test: NAME and PROTOS are required")
  endif()
  if(_rl_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR
      "rpcguard_lint_test: unknown arguments ${_rl_UNPARSED_ARGUMENTS}")
  endif()
  set(_set "${CMAKE_CURRENT_BINARY_DIR}/${_rl_NAME}.pb")
  set(_protos)
  foreach(_p IN LISTS _rl_PROTOS)
    get_filename_component(_p "${_p}" ABSOLUTE
                           BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
    list(APPEND _protos "${_p}")
  endforeach()
  set(_includes -I "${CMAKE_CURRENT_SOURCE_DIR}")
  foreach(_d IN LISTS _rl_IMPORT_DIRS)
    get_filename_component(_d "${_d}" ABSOLUTE
                           BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
    list(APPEND _includes -I "${_d}")
  endforeach()
  list(APPEND _includes -I "${RPCGUARD_PROTO_DIR}")
  foreach(_d IN LISTS Protobuf_INCLUDE_DIRS)
    list(APPEND _includes -I "${_d}")
  endforeach()
  add_custom_command(
    OUTPUT "${_set}"
    COMMAND protobuf::protoc ${_includes} --include_imports
            --include_source_info "--descriptor_set_out=${_set}" ${_protos}
    DEPENDS ${_protos}
    COMMENT "protoc --descriptor_set_out ${_rl_NAME}.pb"
    VERBATIM)
  add_custom_target("${_rl_NAME}_descriptor_set" ALL DEPENDS "${_set}")

  set(_args)
  if(_rl_STRICT)
    list(APPEND _args --strict)
  endif()
  if(_rl_CONFIG)
    get_filename_component(_config "${_rl_CONFIG}" ABSOLUTE
                           BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
    list(APPEND _args --config "${_config}")
  endif()
  add_test(NAME "${_rl_NAME}"
           COMMAND rpcguard::rpcguard_lint ${_args} "${_set}")
endfunction()
