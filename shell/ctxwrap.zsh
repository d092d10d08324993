# ctxwrap shell integration for zsh. Load it from ~/.zshrc (after compinit, if you use it) with:
#     eval "$(ctxwrap init zsh)"
# It adds: completion for every ctxwrap command, opt-in `pi` and `claude` wrappers
# (CTXWRAP_WRAP_PI=1, CTXWRAP_WRAP_CLAUDE=1) and `ctxwrap_prompt_segment`, which prints the
# last known savings of any agent's session from a cache file.
# Nothing here runs on the prompt path except a builtin `read` of that file.

__ctxwrap_status=$?
# Interactive shells only; the guard makes a second `eval` or `source` a no-op.
if [[ -o interactive && -z ${__ctxwrap_loaded-} ]]; then
typeset -g __ctxwrap_loaded=1

# The absolute path of the ctxwrap that printed this script (`ctxwrap init` fills it in), so
# a different ctxwrap on PATH, or none, changes nothing.
typeset -g __ctxwrap_bin=ctxwrap

# Candidates for the words before the cursor, asked of ctxwrap itself (click's completion
# protocol) so they never drift from the commands. Python runs on TAB only.
# Fills the arrays __ctxwrap_plain, __ctxwrap_described and the scalar __ctxwrap_files.
__ctxwrap_candidates() {
    emulate -L zsh
    local -a response
    local type key descr
    typeset -ga __ctxwrap_plain __ctxwrap_described
    typeset -g __ctxwrap_files=
    __ctxwrap_plain=() __ctxwrap_described=()
    response=("${(@f)$(env COMP_WORDS="$1" COMP_CWORD="$2" \
        _CTXWRAP_COMPLETE=zsh_complete "$__ctxwrap_bin" 2>/dev/null)}")
    for type key descr in "${response[@]}"; do
        case $type in
            plain)
                if [[ $descr == _ ]]; then
                    __ctxwrap_plain+=("$key")
                else
                    __ctxwrap_described+=("$key:$descr")
                fi ;;
            dir) __ctxwrap_files=dir ;;
            file) __ctxwrap_files=file ;;
        esac
    done
    return 0
}

_ctxwrap() {
    __ctxwrap_candidates "${words[*]}" $((CURRENT - 1))
    case $__ctxwrap_files in
        dir) _path_files -/ ;;
        file) _path_files -f ;;
    esac
    (( ${#__ctxwrap_described} )) && _describe -V unsorted __ctxwrap_described -U
    (( ${#__ctxwrap_plain} )) && compadd -U -V unsorted -a __ctxwrap_plain
    return 0
}

# compdef exists only after compinit. When the user runs compinit later in ~/.zshrc, register
# from a one-shot precmd hook instead of failing now.
__ctxwrap_compdef() {
    if (( $+functions[compdef] )); then
        compdef _ctxwrap ctxwrap
        precmd_functions=(${precmd_functions:#__ctxwrap_compdef})
    fi
}
if (( $+functions[compdef] )); then
    compdef _ctxwrap ctxwrap
else
    typeset -ga precmd_functions
    precmd_functions+=(__ctxwrap_compdef)
fi

# `pi` and `claude` go through ctxwrap only when asked for (CTXWRAP_WRAP_PI=1,
# CTXWRAP_WRAP_CLAUDE=1), and fall back to the plain agent when ctxwrap is gone or the
# variable is switched off later in the session. `command pi` / `command claude` always
# reach the plain agent.
# `function NAME` and not `NAME()`: an alias of that name (Claude Code's local install adds
# one) would be expanded in `NAME()` and break the whole script; the alias still wins over
# the wrapper, as aliases do.
if [[ ${CTXWRAP_WRAP_PI-} == 1 ]]; then
    function pi {
        if [[ ${CTXWRAP_WRAP_PI-} == 1 ]] && whence -p -- "$__ctxwrap_bin" >/dev/null; then
            "$__ctxwrap_bin" pi "$@"
        else
            command pi "$@"
        fi
    }
fi
if [[ ${CTXWRAP_WRAP_CLAUDE-} == 1 ]]; then
    function claude {
        if [[ ${CTXWRAP_WRAP_CLAUDE-} == 1 ]] && whence -p -- "$__ctxwrap_bin" >/dev/null; then
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
        __line=${__line//[^[:print:]]/}  # never let a file put escape sequences in a prompt
        [[ -n $__line ]] && printf '%s' "${__line[1,64]}"
    fi
    return $__s
}

fi
__ctxwrap_restore_status() { return $1 }
__ctxwrap_restore_status $__ctxwrap_status
