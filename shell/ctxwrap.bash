# ctxwrap shell integration for bash. Load it from ~/.bashrc with:
#     eval "$(ctxwrap init bash)"
# It adds: completion for every ctxwrap command, opt-in `pi` and `claude` wrappers
# (CTXWRAP_WRAP_PI=1, CTXWRAP_WRAP_CLAUDE=1) and `ctxwrap_prompt_segment`, which prints the
# last known savings of any agent's session from a cache file.
# Nothing here runs on the prompt path except a builtin `read` of that file.

__ctxwrap_status=$?
# Interactive shells only; the guard makes a second `eval` or `source` a no-op. An `if` and
# not `return`, because `return` inside `eval` would end the caller's ~/.bashrc.
if [[ $- == *i* && -z ${__ctxwrap_loaded-} ]]; then
__ctxwrap_loaded=1

# The absolute path of the ctxwrap that printed this script (`ctxwrap init` fills it in), so
# a different ctxwrap on PATH, or none, changes nothing.
__ctxwrap_bin=ctxwrap

# TAB asks ctxwrap itself (click's completion protocol), so completions never drift from the
# commands; Python runs on TAB only, never on a prompt.
__ctxwrap_complete() {
    local IFS=$'\n' response completion type value
    COMPREPLY=()
    response=$(env COMP_WORDS="${COMP_WORDS[*]}" COMP_CWORD="$COMP_CWORD" \
        _CTXWRAP_COMPLETE=bash_complete "$__ctxwrap_bin" 2>/dev/null) || return 0
    for completion in $response; do
        IFS=',' read -r type value <<<"$completion"
        case $type in
            dir) COMPREPLY=(); compopt -o dirnames 2>/dev/null ;;
            file) COMPREPLY=(); compopt -o default 2>/dev/null ;;
            plain) COMPREPLY+=("$value") ;;
        esac
    done
    return 0
}
complete -o nosort -F __ctxwrap_complete ctxwrap 2>/dev/null ||
    complete -F __ctxwrap_complete ctxwrap

# `pi` and `claude` go through ctxwrap only when asked for (CTXWRAP_WRAP_PI=1,
# CTXWRAP_WRAP_CLAUDE=1), and fall back to the plain agent when ctxwrap is gone or the
# variable is switched off later in the session. `command pi` / `command claude` always
# reach the plain agent.
# `function NAME` and not `NAME()`: an alias of that name (Claude Code's local install adds
# one) would be expanded in `NAME()` and break the whole script; the alias still wins over
# the wrapper, as aliases do.
if [[ ${CTXWRAP_WRAP_PI-} == 1 ]]; then
    function pi {
        if [[ ${CTXWRAP_WRAP_PI-} == 1 ]] && command -v "$__ctxwrap_bin" >/dev/null 2>&1; then
            "$__ctxwrap_bin" pi "$@"
        else
            command pi "$@"
        fi
    }
fi
if [[ ${CTXWRAP_WRAP_CLAUDE-} == 1 ]]; then
    function claude {
        if [[ ${CTXWRAP_WRAP_CLAUDE-} == 1 ]] && command -v "$__ctxwrap_bin" >/dev/null 2>&1; then
            "$__ctxwrap_bin" claude "$@"
        else
            command claude "$@"
        fi
    }
fi

# Prints the savings line `ctxwrap stats` and the daemon leave in the state dir, or nothing.
# Only builtins: no fork, no daemon call, so it cannot slow or break a prompt. Keeps `$?`.
ctxwrap_prompt_segment() {
    local __s=$? __dir=${XDG_STATE_HOME-} __line=
    [[ $__dir == /* ]] || __dir=$HOME/.local/state
    if [[ -r $__dir/ctxwrap/prompt-segment ]]; then
        IFS= read -r __line <"$__dir/ctxwrap/prompt-segment" 2>/dev/null
        __line=${__line//[![:print:]]/}  # never let a file put escape sequences in a prompt
        [[ -n $__line ]] && printf '%s' "${__line:0:64}"
    fi
    return $__s
}

fi
__ctxwrap_restore_status() { return "$1"; }
__ctxwrap_restore_status "$__ctxwrap_status"
