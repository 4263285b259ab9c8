# Shared by the command-line end-to-end tests: a command's output equals a golden file; a command
# fails with an error that names what was wrong.
check_same() {  # name, expected file, command...: stdout equals the file (plus a final newline)
  local name="$1" want="$2"
  shift 2
  if ! diff <("$@" 2>/dev/null) <(cat "$want"; echo) >/dev/null; then
    echo "FAIL: $name differs from $want"
    diff <("$@" 2>/dev/null) <(cat "$want"; echo) | head -5
    exit 1
  fi
  echo "ok: $name"
}
check_error() {  # name, expected substring, command...: a non-zero exit whose stderr has it
  local name="$1" want="$2"
  shift 2
  local out rc=0
  out="$("$@" 2>&1 >/dev/null)" || rc=$?
  if [[ $rc -eq 0 ]]; then echo "FAIL: $name exited 0"; exit 1; fi
  if [[ "$out" != *"$want"* ]]; then echo "FAIL: $name: '$out' lacks '$want'"; exit 1; fi
  echo "ok: $name ($out)"
}
