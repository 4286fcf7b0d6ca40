//! Tests of the layered configuration: precedence, origins, validation, messages.

use super::*;
use crate::protocol::ToolErrorKind;
use pretty_assertions::assert_eq;

fn resolve(inputs: ConfigInputs<'_>) -> Result<Resolved, ConfigError> {
    Resolved::from_inputs(&inputs)
}

#[test]
fn precedence_is_cli_env_session_agent_file_default() -> anyhow::Result<()> {
    let path = Path::new("/repo/.nop/config.yml");
    let file = "log:\n  level: warn\nsession:\n  lock_timeout_s: 3\n";
    let agent: Map<String, Value> = serde_json::from_str(r#"{"session.lock_timeout_s": 4}"#)?;
    let session: Map<String, Value> =
        serde_json::from_str(r#"{"session": {"lock_timeout_s": 5}}"#)?;
    let mut inputs = ConfigInputs {
        file: Some((path, file)),
        agent: Some(("coder", &agent)),
        session: Some(("s1", &session)),
        ..Default::default()
    };
    let r = resolve(ConfigInputs {
        ..inputs_clone(&inputs)
    })?;
    assert_eq!(r.config.session.lock_timeout_s, 5.0);
    assert_eq!(
        r.entries["session.lock_timeout_s"].1,
        Origin::Session("s1".into())
    );
    assert_eq!(r.config.log.level, LogLevel::Warn);
    assert_eq!(r.entries["log.level"].1, Origin::File(path.into()));

    inputs
        .env
        .insert("NOP_SESSION_LOCK_TIMEOUT_S".into(), "6".into());
    inputs.env.insert("NOP_LOG".into(), "debug".into());
    let r = resolve(inputs_clone(&inputs))?;
    assert_eq!(r.config.session.lock_timeout_s, 6.0);
    assert_eq!(r.config.log.level, LogLevel::Debug);
    assert_eq!(r.entries["log.level"].1, Origin::Env("NOP_LOG".into()));

    inputs.cli.push((
        "--set".into(),
        "session.lock_timeout_s".into(),
        "7.5".into(),
    ));
    let r = resolve(inputs)?;
    assert_eq!(r.config.session.lock_timeout_s, 7.5);
    assert_eq!(
        r.entries["session.lock_timeout_s"].1,
        Origin::Cli("--set".into())
    );
    Ok(())
}

fn inputs_clone<'a>(i: &ConfigInputs<'a>) -> ConfigInputs<'a> {
    ConfigInputs {
        file: i.file,
        agent: i.agent,
        session: i.session,
        env: i.env.clone(),
        cli: i.cli.clone(),
        untrusted: i.untrusted.clone(),
    }
}

#[test]
fn the_user_file_sits_between_the_defaults_and_the_repository_file() -> anyhow::Result<()> {
    let home = tempfile::tempdir()?;
    let user = home.path().join("xdg/nop/config.yml");
    std::fs::create_dir_all(home.path().join("xdg/nop"))?;
    std::fs::write(&user, "provider:\n  model: user-model\n  kind: anthropic\n")?;
    let mut env = BTreeMap::new();
    env.insert("HOME".to_string(), "/nonexistent".to_string());
    env.insert(
        "XDG_CONFIG_HOME".to_string(),
        home.path().join("xdg").display().to_string(),
    );
    let repo = Path::new("/repo/.nop/config.yml");
    let r = resolve(ConfigInputs {
        file: Some((repo, "provider:\n  model: repo-model\n")),
        env: env.clone(),
        ..Default::default()
    })?;
    assert_eq!(r.config.provider.model.as_deref(), Some("repo-model"));
    assert_eq!(r.entries["provider.model"].1, Origin::File(repo.into()));
    assert_eq!(r.config.provider.kind, ProviderKind::Anthropic);
    assert_eq!(r.entries["provider.kind"].1, Origin::User(user.clone()));
    assert_eq!(
        r.entries["provider.kind"].1.to_string(),
        format!("user file {}", user.display())
    );

    // Without XDG_CONFIG_HOME: HOME/.config; a relative value is ignored.
    assert_eq!(
        user_config_path(&BTreeMap::from([
            ("HOME".to_string(), "/home/u".to_string()),
            ("XDG_CONFIG_HOME".to_string(), "relative".to_string()),
        ])),
        Some(PathBuf::from("/home/u/.config/nop/config.yml"))
    );
    assert_eq!(user_config_path(&BTreeMap::new()), None);

    std::fs::write(&user, "agent:\n  max_turns: 0\n")?;
    let err = resolve(ConfigInputs {
        env,
        ..Default::default()
    })
    .err()
    .map(|e| e.to_string())
    .unwrap_or_default();
    assert!(
        err.contains("agent.max_turns") && err.contains(&user.display().to_string()),
        "{err}"
    );
    Ok(())
}

#[test]
fn bad_numbers_in_a_file_name_the_key_and_the_range() {
    let path = Path::new("/repo/.nop/config.yml");
    for (text, expected) in [
        (
            "agent:\n  max_turns: -5\n",
            "/repo/.nop/config.yml:2:14: `agent.max_turns` must be a whole number from 1 to 4294967295, not -5",
        ),
        (
            "log:\n  level: info\nagent:\n  max_turns: 5000000000\n",
            "/repo/.nop/config.yml:4:14: `agent.max_turns` must be a whole number from 1 to 4294967295, not 5000000000",
        ),
        (
            "session:\n  lock_timeout_s: soon\n",
            "/repo/.nop/config.yml:2:19: `session.lock_timeout_s` must be more than 0 and at most 3600 seconds, not \"soon\"",
        ),
        (
            "modle: x\n",
            "/repo/.nop/config.yml:1:1: unknown configuration key `modle`; did you mean `provider.model`?",
        ),
    ] {
        let err = resolve(ConfigInputs {
            file: Some((path, text)),
            ..Default::default()
        })
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert_eq!(err, expected, "{text}");
    }
    // Range checks after the typed parse name the key and the file as well.
    let err = resolve(ConfigInputs {
        file: Some((path, "agent:\n  max_turns: 0\n")),
        ..Default::default()
    })
    .err()
    .map(|e| e.to_string())
    .unwrap_or_default();
    assert_eq!(
        err,
        "configuration key `agent.max_turns` (from file /repo/.nop/config.yml): must be a whole number from 1 to 4294967295, not 0"
    );
}

#[test]
fn yaml_1_1_words_are_the_values_the_key_takes() -> anyhow::Result<()> {
    let path = Path::new("/repo/.nop/config.yml");
    let r = resolve(ConfigInputs {
        file: Some((path, "sandbox: off\nshell:\n  namespaces: off\n")),
        ..Default::default()
    })?;
    assert_eq!(r.config.sandbox, SandboxMode::Off);
    assert_eq!(r.config.shell.namespaces, NamespacesMode::Off);
    Ok(())
}

#[test]
fn file_errors_name_key_and_position() {
    let path = Path::new("config.yml");
    for (text, needle, line) in [
        ("log:\n  levle: info\n", "levle", 2),
        ("session:\n  lock_timeout_s: soon\n", "", 2),
        ("log: [unclosed\n", "", 0),
    ] {
        let err = resolve(ConfigInputs {
            file: Some((path, text)),
            ..Default::default()
        });
        match err {
            Err(ConfigError::Parse { pos, message, .. }) => {
                assert!(message.contains(needle), "{text}: {message}");
                if line > 0 {
                    assert_eq!(pos.map(|p| p.line), Some(line), "{text}: {message}");
                }
            }
            other => panic!("{text}: expected a parse error, got {other:?}"),
        }
    }
}

#[test]
fn bad_values_from_env_and_cli_name_their_origin() {
    let mut env = BTreeMap::new();
    env.insert("NOP_SESSION_LOCK_TIMEOUT_S".to_string(), "-1".to_string());
    let err = resolve(ConfigInputs {
        env,
        ..Default::default()
    })
    .err()
    .map(|e| e.to_string());
    assert!(
        err.as_deref()
            .is_some_and(|e| e.contains("session.lock_timeout_s")
                && e.contains("NOP_SESSION_LOCK_TIMEOUT_S")),
        "{err:?}"
    );
    let err = resolve(ConfigInputs {
        cli: vec![("--set".into(), "log.colour".into(), "x".into())],
        ..Default::default()
    })
    .err()
    .map(|e| e.to_string());
    assert!(
        err.as_deref().is_some_and(|e| e.contains("log.colour")),
        "{err:?}"
    );
    let mut env = BTreeMap::new();
    env.insert("NOP_LOG".to_string(), "loud".to_string());
    let err = resolve(ConfigInputs {
        env,
        ..Default::default()
    });
    assert!(matches!(err, Err(ConfigError::Invalid { .. })), "{err:?}");
    let err = err.err().map(|e| e.to_string()).unwrap_or_default();
    assert_eq!(
        err,
        "configuration key `log.level` (from environment NOP_LOG): must be one of error, warn, info, debug, not loud"
    );

    let err = resolve(ConfigInputs {
        cli: vec![("--set".into(), "agent.max_turns".into(), "-1".into())],
        ..Default::default()
    })
    .err()
    .map(|e| e.to_string())
    .unwrap_or_default();
    assert_eq!(
        err,
        "configuration key `agent.max_turns` (from command line --set): must be a whole number from 1 to 4294967295, not -1"
    );
}

#[test]
fn list_valued_keys_take_a_flow_list_from_the_command_line_and_the_environment()
-> anyhow::Result<()> {
    let mut env = BTreeMap::new();
    env.insert(
        "NOP_ADVISORS_RETRY_ON".to_string(),
        "[NotFound, Timeout]".to_string(),
    );
    let r = resolve(ConfigInputs {
        env,
        ..Default::default()
    })?;
    assert_eq!(
        r.config.advisors.retry_on,
        RetryOn::Kinds(vec!["NotFound".into(), "Timeout".into()])
    );
    let r = resolve(ConfigInputs {
        cli: vec![(
            "--set".into(),
            "advisors.retry_on".into(),
            r#"["NotFound"]"#.into(),
        )],
        ..Default::default()
    })?;
    assert_eq!(
        r.config.advisors.retry_on,
        RetryOn::Kinds(vec!["NotFound".into()])
    );
    assert_eq!(
        r.entries["advisors.retry_on"].1,
        Origin::Cli("--set".into())
    );
    // An empty list empties it; `all` is the default; any other word is neither.
    let r = resolve(ConfigInputs {
        cli: vec![("--set".into(), "advisors.retry_on".into(), "[]".into())],
        ..Default::default()
    })?;
    assert_eq!(r.config.advisors.retry_on, RetryOn::Kinds(Vec::new()));
    assert!(!r.config.advisors.retries(ToolErrorKind::Timeout));
    assert_eq!(
        resolve(ConfigInputs::default())?.config.advisors.retry_on,
        RetryOn::All
    );
    let mut env = BTreeMap::new();
    env.insert("NOP_ADVISORS_RETRY_ON".to_string(), "all".to_string());
    let r = resolve(ConfigInputs {
        env,
        cli: vec![(
            "--set".into(),
            "advisors.retry_on".into(),
            "[Timeout]".into(),
        )],
        ..Default::default()
    })?;
    assert_eq!(
        r.config.advisors.retry_on,
        RetryOn::Kinds(vec!["Timeout".into()])
    );
    let err = resolve(ConfigInputs {
        cli: vec![(
            "--set".into(),
            "advisors.retry_on".into(),
            "NotFound".into(),
        )],
        ..Default::default()
    })
    .err()
    .map(|e| e.to_string())
    .unwrap_or_default();
    assert!(
        err.contains(
            "must be `all` or a list of error kinds, such as [Timeout, NotFound], not NotFound"
        ),
        "{err}"
    );
    Ok(())
}

#[test]
fn a_misspelt_value_is_shown_with_the_accepted_ones_and_the_closest() {
    let said = |text: &str| {
        resolve(ConfigInputs {
            cli: vec![("--set".into(), "provider".into(), text.into())],
            ..Default::default()
        })
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default()
    };
    assert_eq!(
        said("opnai"),
        "configuration key `provider.kind` (from command line --set): must be one of openai, anthropic, not opnai; did you mean `openai`?"
    );
    assert_eq!(
        said("gemini"),
        "configuration key `provider.kind` (from command line --set): must be one of openai, anthropic, not gemini"
    );
    let origin = Origin::File(PathBuf::from("/r/.nop/config.yml"));
    let err = parse_file(&origin, "provider:\n  kind: Anthropc\n")
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert_eq!(
        err,
        "/r/.nop/config.yml:2:9: `provider.kind` must be one of openai, anthropic, not \"Anthropc\"; did you mean `anthropic`?"
    );
}

#[test]
fn an_unknown_key_suggests_at_most_five() {
    let err = resolve(ConfigInputs {
        cli: vec![("--set".into(), "timeout".into(), "1".into())],
        ..Default::default()
    })
    .err()
    .map(|e| e.to_string())
    .unwrap_or_default();
    assert!(
        err.starts_with(
            "unknown configuration key `timeout` (from command line --set); did you mean `"
        ),
        "{err}"
    );
    assert!(err.matches('`').count() <= 2 + 2 * 5, "{err}");
    assert!(!err.contains("chat.batching"), "{err}");
}

#[test]
fn an_untrusted_workspace_s_widening_keys_are_left_out_and_a_session_never_widens() {
    let path = Path::new("/repo/.nop/config.yml");
    let text = "sandbox: off\nhooks:\n  session-start: [\"touch x\"]\nprovider:\n  model: m\n  base_url: http://evil/v1\n";
    let session: serde_json::Map<String, serde_json::Value> =
        serde_json::from_value(serde_json::json!({"sandbox": "off", "agent": {"max_turns": 7}}))
            .unwrap_or_default();
    let inputs = ConfigInputs {
        file: Some((path, text)),
        session: Some(("s1", &session)),
        untrusted: Some("not trusted".into()),
        ..Default::default()
    };
    let resolved = Resolved::from_inputs(&inputs).expect("resolves");
    assert_eq!(resolved.config.provider.model.as_deref(), Some("m"));
    assert_eq!(resolved.config.provider.base_url, None);
    assert!(resolved.config.hooks.session_start.is_empty());
    assert_eq!(resolved.config.sandbox, SandboxMode::BestEffort);
    assert_eq!(resolved.config.agent.max_turns, 7);
    assert_eq!(resolved.set_aside.len(), 2, "{:?}", resolved.set_aside);
    assert!(
        resolved.set_aside[0]
            .contains("sandbox, hooks.session-start, provider.base_url left out: not trusted"),
        "{:?}",
        resolved.set_aside
    );
    let trusted = ConfigInputs {
        untrusted: None,
        ..inputs_clone(&inputs)
    };
    let resolved = Resolved::from_inputs(&trusted).expect("resolves");
    assert_eq!(resolved.config.hooks.session_start.len(), 1);
    assert_eq!(resolved.config.sandbox, SandboxMode::Off);
}

#[test]
fn text_tool_calls_auto_is_off_for_the_vendors_own_apis_only() -> anyhow::Result<()> {
    let with = |kind: ProviderKind, base_url: Option<&str>| ProviderConfig {
        kind,
        base_url: base_url.map(str::to_string),
        ..Default::default()
    };
    for (kind, url) in [
        (ProviderKind::Openai, None),
        (ProviderKind::Anthropic, None),
        (ProviderKind::Openai, Some("https://api.openai.com/v1")),
        (ProviderKind::Openai, Some("https://API.OpenAI.com:443/v1/")),
        (ProviderKind::Anthropic, Some("https://api.anthropic.com")),
        (
            ProviderKind::Openai,
            Some("https://me.openai.azure.com/openai"),
        ),
    ] {
        assert!(!with(kind, url).recovers_text_tool_calls(), "{url:?}");
    }
    for (kind, url) in [
        (ProviderKind::Openai, "http://127.0.0.1:8080/v1"),
        (ProviderKind::Openai, "http://localhost:11434/v1"),
        (ProviderKind::Openai, "https://openrouter.ai/api/v1"),
        (
            ProviderKind::Openai,
            "https://api.openai.com.example.org/v1",
        ),
        (ProviderKind::Anthropic, "http://localhost:4000"),
    ] {
        assert!(with(kind, Some(url)).recovers_text_tool_calls(), "{url}");
    }
    // The key overrides `auto` either way, and YAML's `on`/`off` are its values.
    let path = Path::new("/repo/.nop/config.yml");
    for (text, local, vendor) in [
        ("provider:\n  text_tool_calls: off\n", false, false),
        ("provider:\n  text_tool_calls: on\n", true, true),
        ("provider:\n  text_tool_calls: auto\n", true, false),
    ] {
        let mut config = resolve(ConfigInputs {
            file: Some((path, text)),
            ..Default::default()
        })?
        .config
        .provider;
        config.base_url = Some("http://127.0.0.1:8080/v1".into());
        assert_eq!(config.recovers_text_tool_calls(), local, "{text}");
        config.base_url = Some("https://api.openai.com/v1".into());
        assert_eq!(config.recovers_text_tool_calls(), vendor, "{text}");
    }
    let err = resolve(ConfigInputs {
        file: Some((path, "provider:\n  text_tool_calls: sometimes\n")),
        ..Default::default()
    })
    .expect_err("refused");
    assert!(
        err.to_string()
            .contains("`provider.text_tool_calls` must be one of auto, on, off"),
        "{err}"
    );
    Ok(())
}
