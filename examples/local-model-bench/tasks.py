"""The benchmark's tasks: each is a few files, a prompt, and a check command that exits 0 when
the task is done. Kept tiny: the model generates 8-10 tokens/s on two cores."""

TASKS = [
    {
        "name": "py-off-by-one",
        "files": {
            "window.py": (
                "def last_n(items, n):\n"
                '    """The last n items of the list."""\n'
                "    return items[len(items) - n - 1:]\n"
            ),
            "test_window.py": (
                "from window import last_n\n\n"
                "assert last_n([1, 2, 3, 4], 2) == [3, 4], last_n([1, 2, 3, 4], 2)\n"
                'print("ok")\n'
            ),
        },
        "prompt": "`python3 test_window.py` fails. Fix the bug in window.py so that it passes.",
        # The test as given (a model that edits the test instead of the code fails).
        "check": "git diff --quiet HEAD -- test_window.py && python3 test_window.py",
    },
    {
        "name": "py-add-function",
        "files": {
            "textutil.py": (
                "def shout(s):\n"
                "    return s.upper() + \"!\"\n"
            ),
        },
        "prompt": (
            "Add a function `is_palindrome(s)` to textutil.py that returns True when the string "
            "reads the same backwards, else False."
        ),
        "check": (
            "python3 -c \"from textutil import is_palindrome as p, shout; "
            "assert p('abba') and p('racecar') and not p('abc') and shout('a') == 'A!'\""
        ),
    },
    {
        "name": "rust-failing-test",
        "files": {
            "Cargo.toml": '[package]\nname = "calc"\nversion = "0.1.0"\nedition = "2021"\n',
            "src/lib.rs": (
                "pub fn area(width: u32, height: u32) -> u32 {\n"
                "    width + height\n"
                "}\n\n"
                "#[cfg(test)]\n"
                "mod tests {\n"
                "    #[test]\n"
                "    fn area_of_a_rectangle() {\n"
                "        assert_eq!(super::area(3, 4), 12);\n"
                "    }\n"
                "}\n"
            ),
            ".gitignore": "target/\n",
        },
        "prompt": "`cargo test --offline` fails. Fix src/lib.rs so that the test passes.",
        "check": (
            "grep -q 'assert_eq!(super::area(3, 4), 12);' src/lib.rs && cargo test --offline -q"
        ),
    },
    {
        "name": "answer-file",
        "files": {
            "server.log": "".join(
                f"2025-01-0{1 + i % 9} {'ERROR' if i % 3 == 0 else 'INFO'} event {i}\n"
                for i in range(20)
            ),
        },
        "prompt": (
            "Count the lines of server.log that contain ERROR and write just that number to "
            "answer.txt."
        ),
        "check": "test \"$(tr -d ' \\n' < answer.txt)\" = 7",
    },
    {
        "name": "rename-across-files",
        "files": {
            "shop.py": (
                "def compute_total(prices):\n"
                "    return sum(prices)\n"
            ),
            "main.py": (
                "from shop import compute_total\n\n"
                "print(compute_total([1, 2, 3]))\n"
            ),
        },
        "prompt": (
            "Rename the function compute_total to sum_prices in shop.py and everywhere it is "
            "used."
        ),
        "check": (
            "! grep -rq compute_total --include=*.py . && "
            "test \"$(python3 main.py)\" = 6"
        ),
    },
    {
        "name": "fix-shell-script",
        "files": {
            "count.sh": (
                "#!/bin/bash\n"
                "# Prints how many files the directory given as first argument holds.\n"
                "ls $2 | wc -l\n"
            ),
        },
        "prompt": (
            "count.sh should print the number of files in the directory given as its first "
            "argument, but `bash count.sh /etc` prints the wrong number. Fix count.sh."
        ),
        "check": (
            "mkdir -p /var/tmp/nop-bench-probe.$$ && touch /var/tmp/nop-bench-probe.$$/a "
            "/var/tmp/nop-bench-probe.$$/b && "
            "out=$(bash count.sh /var/tmp/nop-bench-probe.$$); "
            "rm -r /var/tmp/nop-bench-probe.$$; test \"$(echo $out)\" = 2"
        ),
    },
    {
        "name": "json-config-edit",
        "files": {
            "config.json": '{\n  "name": "api",\n  "port": 8080,\n  "debug": false\n}\n',
        },
        "prompt": "Change the port in config.json to 9090. Keep the other settings.",
        "check": (
            "python3 -c \"import json; c = json.load(open('config.json')); "
            "assert c == {'name': 'api', 'port': 9090, 'debug': False}, c\""
        ),
    },
]
