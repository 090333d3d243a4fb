# Sourced by scripts/_venv.sh and scripts/frameworks: say, and pip run into $VENV with its output as
# steps (pip_install ARGS; the whole output goes to $VENV/.pip.log).

say() { echo "$*" >&2; }

# pip's output as its steps: one line per package fetched (on a terminal, one line rewritten in
# place), all of it kept in the log.
pip_steps() {
    local log="$VENV/.pip.log" count=0 line name shown
    : > "$log"
    while IFS= read -r line; do
        printf '%s\n' "$line" >> "$log"
        case "$line" in
            Collecting\ *) name="${line#Collecting }"; name="${name%% *}"; name="${name%%[<>=!~;[]*}";;
            Processing\ /*) name="${line#Processing }"; name="${name%% *}"; name="${name##*/}"; name="${name%%-[0-9]*}";;
            *"Installing build dependencies: started") name="";  shown="  preparing the build of relay";;
            *"Building editable for"*": started") name=""; shown="  building relay (editable: your changes apply)";;
            "Installing collected packages"*) name=""; shown="  installing $count packages";;
            *) continue;;
        esac
        if [ -n "$name" ]; then count=$((count + 1)); shown="  fetching $count: $name"; fi
        if [ -t 2 ]; then printf '\r\033[K%s' "${shown:0:100}" >&2; else say "$shown"; fi
    done
    if [ -t 2 ]; then printf '\r\033[K' >&2; fi
}

pip_install() {
    local started=$SECONDS
    if ! "$VENV/bin/python" -m pip install --disable-pip-version-check --progress-bar off "$@" 2>&1 | pip_steps; then
        say "pip failed; the end of its output ($VENV/.pip.log):"
        tail -n 20 "$VENV/.pip.log" >&2
        exit 1
    fi
    say "  done in $((SECONDS - started)) s"
}
