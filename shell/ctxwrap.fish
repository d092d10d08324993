# ctxwrap shell integration for fish. Load it from ~/.config/fish/config.fish with:
#     ctxwrap init fish | source
# It adds: completion for every ctxwrap command, opt-in `pi` and `claude` wrappers
# (CTXWRAP_WRAP_PI=1, CTXWRAP_WRAP_CLAUDE=1) and `ctxwrap_prompt_segment`, which prints the
# last known savings of any agent's session from a cache file.
# Nothing here runs on the prompt path except a builtin `read` of that file.

set -l __ctxwrap_status $status
# Interactive shells only; the guard makes a second `source` a no-op.
if status is-interactive; and not set -q __ctxwrap_loaded
    set -g __ctxwrap_loaded 1

    # The absolute path of the ctxwrap that printed this script (`ctxwrap init` fills it in),
    # so a different ctxwrap on PATH, or none, changes nothing.
    set -g __ctxwrap_bin ctxwrap

    # TAB asks ctxwrap itself (click's completion protocol), so completions never drift from
    # the commands; Python runs on TAB only, never on a prompt.
    function __ctxwrap_complete
        set -l response (env _CTXWRAP_COMPLETE=fish_complete COMP_WORDS=(commandline -cp) \
            COMP_CWORD=(commandline -t) $__ctxwrap_bin 2>/dev/null)
        for completion in $response
            set -l metadata (string split -m 1 "," -- $completion)
            switch $metadata[1]
                case dir
                    __fish_complete_directories $metadata[2]
                case file
                    __fish_complete_path $metadata[2]
                case plain
                    echo $metadata[2]
            end
        end
    end
    complete --no-files --command ctxwrap --arguments "(__ctxwrap_complete)"

    # `pi` and `claude` go through ctxwrap only when asked for (CTXWRAP_WRAP_PI=1,
    # CTXWRAP_WRAP_CLAUDE=1), and fall back to the plain agent when ctxwrap is gone or the
    # variable is switched off later in the session. `command pi` / `command claude` always
    # reach the plain agent.
    if test "$CTXWRAP_WRAP_PI" = 1
        function pi --description 'pi through ctxwrap (CTXWRAP_WRAP_PI=1)'
            if test "$CTXWRAP_WRAP_PI" = 1; and command -q $__ctxwrap_bin
                $__ctxwrap_bin pi $argv
            else
                command pi $argv
            end
        end
    end
    if test "$CTXWRAP_WRAP_CLAUDE" = 1
        function claude --description 'Claude Code through ctxwrap (CTXWRAP_WRAP_CLAUDE=1)'
            if test "$CTXWRAP_WRAP_CLAUDE" = 1; and command -q $__ctxwrap_bin
                $__ctxwrap_bin claude $argv
            else
                command claude $argv
            end
        end
    end

    # Prints the savings line `ctxwrap stats` and the daemon leave in the state dir, or
    # nothing. Only builtins: no fork, no daemon call. Keeps `$status`.
    function ctxwrap_prompt_segment
        set -l s $status
        set -l dir $XDG_STATE_HOME
        string match -q '/*' -- "$dir"; or set dir $HOME/.local/state
        set -l file $dir/ctxwrap/prompt-segment
        if test -r $file
            set -l line
            read -l line <$file 2>/dev/null
            # never let a file put escape sequences in a prompt
            set line (string replace -ra '[^[:print:]]' '' -- "$line")
            test -n "$line"; and printf '%s' (string sub -l 64 -- "$line")
        end
        return $s
    end
end
function __ctxwrap_restore_status
    return $argv[1]
end
__ctxwrap_restore_status $__ctxwrap_status
