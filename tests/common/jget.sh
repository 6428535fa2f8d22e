# jget PATH: prints the value at PATH (dot-separated keys and list indexes,
# e.g. error.param or choices.0.text) of the JSON document on stdin: strings
# raw, other values as compact JSON, "null" when absent. Shared by the shell
# integration tests; jq rather than a Python one-liner because these scripts
# call it hundreds of times and an interpreter start costs seconds on a
# loaded 2-core CI machine.
jget() {
  local path="" k
  local -a keys
  IFS=. read -ra keys <<<"$1"
  for k in "${keys[@]}"; do
    if [[ $k =~ ^[0-9]+$ ]]; then path+="[$k]?"; else path+="[\"$k\"]?"; fi
  done
  jq -rc "first(.$path, null)"
}
