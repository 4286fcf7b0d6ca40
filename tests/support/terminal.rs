//! nop on a real terminal: a tmux session running it, keys typed into it, and its screen read
//! back. Killed when dropped.

use std::process::Command;
use std::time::{Duration, Instant};

use super::Repo;
use super::mock::MockServer;

pub struct Terminal(pub String);

impl Drop for Terminal {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["kill-session", "-t", &self.0])
            .status();
    }
}

impl Terminal {
    /// `nop ARGS` in `repo` on a 120×30 terminal, with the environment that points it at
    /// `server` plus `env`; waits until the screen shows `ready`.
    pub fn start(
        repo: &Repo,
        server: &MockServer,
        tag: &str,
        args: &str,
        env: &[(&str, &str)],
        ready: &str,
    ) -> Terminal {
        let env: Vec<(String, String)> = super::model_env(server, "openai")
            .into_iter()
            .chain(env.iter().map(|(k, v)| (k.to_string(), v.to_string())))
            .collect();
        Terminal::start_with(repo, tag, args, &env, ready)
    }

    /// [`Terminal::start`] on a `cols`×`rows` terminal.
    pub fn start_sized(
        repo: &Repo,
        server: &MockServer,
        tag: &str,
        (cols, rows): (u16, u16),
        ready: &str,
    ) -> Terminal {
        let env = super::model_env(server, "openai");
        Terminal::open(repo, tag, "run", &env, ready, (cols, rows))
    }

    /// `nop ARGS` in `repo` with exactly the environment `env` (and HOME: the repository).
    pub fn start_with(
        repo: &Repo,
        tag: &str,
        args: &str,
        env: &[(String, String)],
        ready: &str,
    ) -> Terminal {
        Terminal::open(repo, tag, args, env, ready, (120, 30))
    }

    fn open(
        repo: &Repo,
        tag: &str,
        args: &str,
        env: &[(String, String)],
        ready: &str,
        (cols, rows): (u16, u16),
    ) -> Terminal {
        let name = format!("nop-{tag}-{}", std::process::id());
        let nop = assert_cmd::cargo::cargo_bin("nop");
        let env: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let command = format!(
            "cd {} && env -i HOME={} XDG_STATE_HOME={} {} {} {args}; sleep 30",
            repo.path().display(),
            repo.path().display(),
            repo.state.path().display(),
            env.join(" "),
            nop.display()
        );
        let status = Command::new("tmux")
            .args([
                "new-session",
                "-d",
                "-x",
                &cols.to_string(),
                "-y",
                &rows.to_string(),
                "-s",
                &name,
                &command,
            ])
            .status()
            .expect("tmux");
        assert!(status.success());
        let t = Terminal(name);
        t.wait_for(ready);
        t
    }

    /// Makes the terminal `cols`×`rows`.
    pub fn resize(&self, cols: u16, rows: u16) {
        let status = Command::new("tmux")
            .args(["resize-window", "-t", &self.0, "-x", &cols.to_string()])
            .args(["-y", &rows.to_string()])
            .status()
            .expect("tmux");
        assert!(status.success());
    }

    pub fn type_line(&self, text: &str) {
        Command::new("tmux")
            .args(["send-keys", "-t", &self.0, text, "Enter"])
            .status()
            .expect("keys");
    }

    /// Waits until a line showing `text` comes after the last line showing `after` (a
    /// question asked after a given prompt, whatever scrolled away).
    pub fn wait_for_after(&self, after: &str, text: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let s = self.screen();
            let lines: Vec<&str> = s.lines().collect();
            if let Some(from) = lines.iter().rposition(|l| l.contains(after))
                && lines[from + 1..].iter().any(|l| l.contains(text))
            {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "`{text}` never appeared after `{after}`; screen:\n{s}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Keys as tmux names them (`Escape`, `C-c`, `y`), without Enter.
    pub fn press(&self, keys: &[&str]) {
        Command::new("tmux")
            .args(["send-keys", "-t", &self.0])
            .args(keys)
            .status()
            .expect("keys");
    }

    /// What the terminal shows now.
    pub fn screen(&self) -> String {
        let out = Command::new("tmux")
            .args(["capture-pane", "-p", "-t", &self.0])
            .output()
            .expect("tmux capture-pane");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Waits until the screen shows `text` (a condition, polled; fails after 20 s).
    pub fn wait_for(&self, text: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let s = self.screen();
            if s.contains(text) {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "`{text}` never appeared; screen:\n{s}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until `text` is on the screen and the prompt is back under it: nop waits for input.
    /// The prompt is `›`, or `MODE ›` in an approval mode other than the default.
    /// (A line typed before that goes to the still-running agent's queue, as it should.)
    pub fn wait_for_prompt_after(&self, text: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let s = self.screen();
            let lines: Vec<&str> = s.lines().filter(|l| !l.trim().is_empty()).collect();
            let at = lines.iter().rposition(|l| l.contains(text));
            if at.is_some_and(|i| i + 1 < lines.len())
                && lines
                    .last()
                    .map(|l| l.trim())
                    .is_some_and(|l| l == "›" || l.ends_with(" ›"))
            {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "`{text}` and then the prompt never appeared; screen:\n{s}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
