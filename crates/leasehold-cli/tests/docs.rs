//! The documentation against the code: the README, the command-line
//! reference (`docs/cli.md`) and the store guides may not drift from what
//! the `leasehold` command and the stores accept.
//!
//! * every command and every long option the command's `--help` shows is in
//!   `docs/cli.md` (a `### \`leasehold CMD\`` section with an options table;
//!   the global options in their own table), and every command and option
//!   `docs/cli.md`, the README and the guides name exists;
//! * every exit code `src/main.rs` defines (`EXIT_*`), and every one the
//!   help lists, is in `docs/cli.md`'s exit-code table, and that table
//!   holds no code that neither defines;
//! * every environment variable the help lists is in `docs/cli.md`;
//! * every store URL scheme (from `--help`, and from the store opener's
//!   source) has a section in `docs/cli.md`, and every scheme `--help`
//!   shows a `leasehold run` example in the README;
//! * every URL parameter each store's parser accepts (read from the
//!   `QuerySpec` in its source) is in that store's guide, and the guide
//!   names no other;
//! * every field of the JSON the command prints is named in `docs/cli.md`;
//! * every relative link in the documentation points to a file that exists
//!   (and to a heading that exists, for links into Markdown files);
//! * the README stays short.
//!
//! The clap definition lives in the binary crate, so the command's own
//! `--help` output is parsed (the binary cargo builds for this test), and
//! checked against the options `src/cli.rs` declares.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_leasehold");

/// The longest the README may grow.
const README_MAX_LINES: usize = 220;

/// Options that `docs/cli.md` or the README may name that are not
/// leasehold's: cargo's, in the install and test commands.
const CARGO_OPTIONS: &[&str] = &[
    "workspace",
    "locked",
    "path",
    "git",
    "features",
    "no-default-features",
    "release",
    "bin",
];

/// The documents whose every `--option` and `leasehold COMMAND` must exist.
const WRITTEN_FOR_USERS: &[&str] = &[
    "README.md",
    "docs/cli.md",
    "docs/guarantees.md",
    "docs/sqlite.md",
    "crates/leasehold/README.md",
    "crates/leasehold-azure/README.md",
    "crates/leasehold-dynamodb/README.md",
    "crates/leasehold-postgres/README.md",
    "crates/leasehold-redis/README.md",
    "crates/leasehold-etcd/README.md",
    "crates/leasehold-s3/README.md",
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(path: &str) -> String {
    let path = root().join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `leasehold ARGS`'s standard output (for `--help`: the long help).
fn leasehold(args: &[&str]) -> String {
    let out = Command::new(BIN)
        .args(args)
        .env_remove("LEASEHOLD_STORE")
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "leasehold {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// The lines of the help section that starts with the line `title`
/// (`Commands:`, `Options:`), up to the next line that is not indented.
fn help_section<'a>(help: &'a str, title: &str) -> Vec<&'a str> {
    help.lines()
        .skip_while(|l| *l != title)
        .skip(1)
        .take_while(|l| l.is_empty() || l.starts_with(' '))
        .collect()
}

/// The commands `leasehold --help` lists.
fn commands(help: &str) -> BTreeSet<String> {
    help_section(help, "Commands:")
        .into_iter()
        .filter(|l| l.starts_with("  ") && !l[2..].starts_with(' '))
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .collect()
}

/// The long options (without `--`) of a help's `Options:` section: lines
/// `  -v, --verbose` or `      --store <URL>` (descriptions are indented
/// further).
fn options(help: &str) -> BTreeSet<String> {
    help_section(help, "Options:")
        .into_iter()
        .filter(|l| {
            let indent = l.len() - l.trim_start().len();
            indent <= 6 && l.trim_start().starts_with('-')
        })
        .flat_map(|l| {
            l.split([' ', ','])
                .filter_map(|t| t.strip_prefix("--"))
                .filter(|t| !t.is_empty())
                .map(|t| {
                    t.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                        .next()
                        .unwrap()
                        .to_string()
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The text of the help for the option `--name` (its line and description).
fn option_help(help: &str, name: &str) -> String {
    let section = help_section(help, "Options:");
    let start = section
        .iter()
        .position(|l| l.trim_start().starts_with(&format!("--{name}")))
        .unwrap_or_else(|| panic!("--{name} is not in the help"));
    let mut text = String::from(section[start]);
    for l in &section[start + 1..] {
        let indent = l.len() - l.trim_start().len();
        if !l.is_empty() && indent <= 6 && l.trim_start().starts_with('-') {
            break;
        }
        text.push('\n');
        text.push_str(l);
    }
    text
}

/// Markdown split into sections by heading: (heading line, body).
fn sections(md: &str) -> Vec<(String, String)> {
    let mut out = vec![(String::new(), String::new())];
    let mut fenced = false;
    for line in md.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        }
        if !fenced && line.starts_with('#') {
            out.push((line.to_string(), String::new()));
        } else {
            let body = &mut out.last_mut().unwrap().1;
            body.push_str(line);
            body.push('\n');
        }
    }
    out
}

/// The body of the section whose heading is `heading`, with its
/// subsections (deeper headings) up to the next heading as deep or less.
fn section(md: &str, heading: &str) -> String {
    let all = sections(md);
    let level = |h: &str| h.chars().take_while(|c| *c == '#').count();
    let start = all
        .iter()
        .position(|(h, _)| h == heading)
        .unwrap_or_else(|| panic!("no section {heading:?}"));
    let mut text = all[start].1.clone();
    for (h, body) in &all[start + 1..] {
        if level(h) <= level(heading) {
            break;
        }
        text.push_str(h);
        text.push('\n');
        text.push_str(body);
    }
    text
}

/// The first cells of a section's table rows (header and separator rows
/// left out).
fn first_cells(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.starts_with('|') && !l.starts_with("|---"))
        .filter_map(|l| l.split('|').nth(1).map(|c| c.trim().to_string()))
        .filter(|c| !c.is_empty() && !matches!(c.as_str(), "option" | "code" | "parameter"))
        .collect()
}

/// The names written in backquotes in `cell`.
fn backquoted(cell: &str) -> Vec<String> {
    between(cell, '`')
}

/// The pieces of `text` that stand between a pair of `mark`s.
fn between(text: &str, mark: char) -> Vec<String> {
    text.split(mark)
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// The long options (without `--`) named in `text`.
fn named_options(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(at) = text[i..].find("--") {
        let start = i + at + 2;
        let before_ok = i + at == 0 || !bytes[i + at - 1].is_ascii_alphanumeric();
        let end = text[start..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .map_or(text.len(), |e| start + e);
        let name = &text[start..end];
        if before_ok && name.starts_with(|c: char| c.is_ascii_lowercase()) {
            names.insert(name.trim_end_matches('-').to_string());
        }
        i = end.max(start);
    }
    names
}

/// The text in code: fenced blocks' lines and inline code spans (which may
/// run over a line break).
fn code_pieces(md: &str) -> Vec<String> {
    let mut pieces = Vec::new();
    let mut prose = String::new();
    let mut fenced = false;
    for line in md.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
            pieces.extend(backquoted(&std::mem::take(&mut prose)));
            continue;
        }
        if fenced {
            pieces.push(line.to_string());
        } else {
            prose.push_str(line);
            prose.push('\n');
        }
    }
    pieces.extend(backquoted(&prose));
    pieces
}

/// The commands named in code as `leasehold [GLOBAL OPTIONS] COMMAND`.
fn named_commands(md: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for piece in code_pieces(md) {
        let tokens: Vec<&str> = piece.split_whitespace().collect();
        for (i, _) in tokens
            .iter()
            .enumerate()
            .filter(|(_, t)| **t == "leasehold")
        {
            let mut rest = tokens[i + 1..].iter();
            let mut in_brackets = false;
            while let Some(t) = rest.next() {
                if in_brackets || t.starts_with('[') {
                    in_brackets = !t.ends_with(']');
                    continue;
                }
                if *t == "--store" {
                    rest.next();
                    continue;
                }
                if t.starts_with('-') {
                    continue;
                }
                let placeholder = t.chars().all(|c| c.is_ascii_uppercase() || c == '_');
                if !placeholder {
                    names.insert(t.trim_end_matches(['`', '\'', ',', '.']).to_string());
                }
                break;
            }
        }
    }
    names
}

struct Cli {
    commands: BTreeSet<String>,
    /// Each command's own options (the global ones left out).
    options: BTreeMap<String, BTreeSet<String>>,
    global: BTreeSet<String>,
}

impl Cli {
    fn read() -> Cli {
        let help = leasehold(&["--help"]);
        let commands = commands(&help);
        assert!(
            commands.contains("run") && commands.contains("break"),
            "{commands:?}"
        );
        let global = options(&help);
        assert!(global.contains("store"), "{global:?}");
        let options = commands
            .iter()
            .map(|c| {
                // `help` is clap's own: it takes no options.
                if c == "help" {
                    return (c.clone(), BTreeSet::new());
                }
                let own = options(&leasehold(&[c, "--help"]))
                    .into_iter()
                    .filter(|o| !global.contains(o))
                    .collect();
                (c.clone(), own)
            })
            .collect();
        Cli {
            commands,
            options,
            global,
        }
    }

    fn all_options(&self) -> BTreeSet<String> {
        let mut all = self.global.clone();
        for own in self.options.values() {
            all.extend(own.iter().cloned());
        }
        all
    }
}

#[test]
fn every_command_and_option_is_documented_and_exists() {
    let cli = Cli::read();
    let doc = read("docs/cli.md");

    let documented: BTreeSet<String> = sections(&doc)
        .into_iter()
        .filter_map(|(h, _)| {
            h.strip_prefix("### `leasehold ")
                .and_then(|c| c.strip_suffix('`'))
                .map(str::to_string)
        })
        .collect();
    assert_eq!(
        documented, cli.commands,
        "docs/cli.md's `### \\`leasehold CMD\\`` sections against the commands of `leasehold --help`"
    );

    let table = |text: &str| -> BTreeSet<String> {
        first_cells(text)
            .iter()
            .flat_map(|c| named_options(c))
            .collect()
    };
    assert_eq!(
        table(&section(&doc, "## Global options")),
        cli.global,
        "docs/cli.md's global options table against `leasehold --help`"
    );
    for (command, own) in &cli.options {
        let text = section(&doc, &format!("### `leasehold {command}`"));
        assert_eq!(
            &table(&text),
            own,
            "the options table of `leasehold {command}` in docs/cli.md against `leasehold {command} --help`"
        );
    }

    let known = cli.all_options();
    for file in WRITTEN_FOR_USERS {
        let text = &read(file);
        for name in named_options(text) {
            assert!(
                known.contains(&name) || CARGO_OPTIONS.contains(&name.as_str()),
                "{file} names --{name}, which no leasehold command accepts"
            );
        }
        for name in named_commands(text) {
            assert!(
                cli.commands.contains(&name) || name == "__watchdog",
                "{file} names the command `leasehold {name}`, which does not exist"
            );
        }
    }
}

/// The long options the clap definition (`src/cli.rs`) declares: each
/// `#[arg(...)]` attribute with `long`, named by `long = "..."` or by its
/// field (`once_per` is `--once-per`).
fn declared_options() -> BTreeSet<String> {
    let source = read("crates/leasehold-cli/src/cli.rs");
    let lines: Vec<&str> = source.lines().map(str::trim).collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    while i < lines.len() {
        if !lines[i].starts_with("#[arg(") {
            i += 1;
            continue;
        }
        let mut attribute = String::new();
        while !attribute.trim_end().ends_with(")]") {
            attribute.push_str(lines[i]);
            attribute.push(' ');
            i += 1;
        }
        let is_long = attribute
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .any(|w| w == "long");
        if !is_long {
            continue;
        }
        let name = match attribute.split_once("long = \"") {
            Some((_, rest)) => rest[..rest.find('"').unwrap()].to_string(),
            None => {
                let field = lines[i..]
                    .iter()
                    .find(|l| !l.starts_with("#[") && !l.starts_with("//"))
                    .unwrap();
                let field = field.trim_start_matches("pub ");
                field[..field.find(':').unwrap()].replace('_', "-")
            }
        };
        names.insert(name);
    }
    names
}

#[test]
fn the_help_shows_every_option_cli_rs_declares() {
    let cli = Cli::read();
    let declared = declared_options();
    assert!(declared.contains("once-per"), "{declared:?}");
    let shown: BTreeSet<String> = cli
        .all_options()
        .into_iter()
        .filter(|o| o != "help" && o != "version")
        .collect();
    assert_eq!(
        declared, shown,
        "the long options of src/cli.rs against those --help shows (a hidden option?)"
    );
}

#[test]
fn every_environment_variable_of_the_help_is_documented() {
    let help = leasehold(&["--help"]);
    let block: Vec<&str> = help
        .lines()
        .skip_while(|l| *l != "Environment:")
        .skip(1)
        .take_while(|l| l.starts_with(' '))
        .collect();
    let names: BTreeSet<&str> = block
        .iter()
        .flat_map(|l| l.split(|c: char| !(c.is_ascii_uppercase() || c == '_')))
        .filter(|w| w.len() > 3 && w.contains('_'))
        .collect();
    assert!(names.contains("LEASEHOLD_STORE"), "{block:?}");
    let section = section(&read("docs/cli.md"), "## Environment");
    for name in names {
        assert!(
            section.contains(&format!("`{name}`")),
            "{name} (leasehold --help) is not in docs/cli.md's Environment section"
        );
    }
}

/// The exit codes `src/exit.rs` defines: `const EXIT_…: u8 = N;`.
fn defined_exit_codes() -> BTreeMap<String, u32> {
    read("crates/leasehold-cli/src/exit.rs")
        .lines()
        .filter_map(|l| {
            let rest = l.trim().strip_prefix("pub ").unwrap_or(l.trim());
            let rest = rest.strip_prefix("const EXIT_")?;
            let (name, value) = rest.split_once(':')?;
            let value = value.split('=').nth(1)?.trim().trim_end_matches(';');
            Some((format!("EXIT_{name}"), value.parse().ok()?))
        })
        .collect()
}

fn numbers(text: &str) -> BTreeSet<u32> {
    text.split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse().ok())
        .collect()
}

#[test]
fn every_exit_code_is_in_the_table() {
    let defined = defined_exit_codes();
    assert!(
        defined.len() >= 4,
        "no EXIT_ constants found in src/exit.rs: {defined:?}"
    );
    let help = leasehold(&["--help"]);
    let help_block: String = help
        .lines()
        .skip_while(|l| *l != "Exit codes:")
        .skip(1)
        .take_while(|l| l.starts_with(' ') || l.starts_with(|c: char| c.is_alphabetic()))
        .collect::<Vec<_>>()
        .join("\n");
    // The codes the help's table lists, one a line.
    let listed: BTreeSet<u32> = help_block
        .lines()
        .filter_map(|l| l.strip_prefix("  "))
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect();
    assert!(
        listed.contains(&75),
        "no exit codes in --help: {help_block}"
    );

    let doc = read("docs/cli.md");
    let table: BTreeSet<u32> = first_cells(&section(&doc, "## Exit codes"))
        .iter()
        .flat_map(|c| c.split(',').filter_map(|n| n.trim().parse::<u32>().ok()))
        .collect();
    for (name, code) in &defined {
        assert!(
            table.contains(code),
            "{name} = {code} (src/exit.rs) is not in docs/cli.md's exit-code table"
        );
    }
    for code in &listed {
        assert!(
            table.contains(code),
            "exit code {code} (leasehold --help) is not in docs/cli.md's exit-code table"
        );
    }
    let anywhere = numbers(&help_block);
    for code in &table {
        assert!(
            anywhere.contains(code) || defined.values().any(|c| c == code),
            "docs/cli.md's exit-code table has {code}, which neither src/exit.rs nor --help knows"
        );
    }
}

/// The schemes named in `text` as `scheme:` followed by `//` or an
/// upper-case placeholder (`sqlite:PATH`, `azblob://CONTAINER`).
fn schemes_in(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for (at, _) in text.match_indices(':') {
        let before = &text[..at];
        let start = before
            .rfind(|c: char| !c.is_ascii_alphanumeric())
            .map_or(0, |i| i + 1);
        let scheme = &before[start..];
        let after = &text[at + 1..];
        if !scheme.is_empty()
            && scheme.starts_with(|c: char| c.is_ascii_lowercase())
            && (after.starts_with("//") || after.starts_with(|c: char| c.is_ascii_uppercase()))
        {
            found.insert(scheme.to_string());
        }
    }
    found
}

/// The schemes the store opener dispatches on (`Some("postgres" |
/// "postgresql") => …` in `open_backend_in`, and the cloud stores' in
/// `open_cloud`).
fn opener_schemes() -> BTreeSet<String> {
    let source = read("crates/leasehold-stores/src/lib.rs");
    let body = |name: &str| {
        let body = &source[source.find(name).expect(name)..];
        body[..body.find("\n}\n").unwrap()].to_string()
    };
    [body("fn open_backend_in("), body("fn open_cloud(")]
        .concat()
        .lines()
        .filter_map(|l| l.trim().strip_prefix("Some(\""))
        .flat_map(|l| {
            let patterns = l.split(')').next().unwrap();
            patterns
                .split('|')
                .map(|p| p.trim().trim_matches('"').to_string())
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn every_store_scheme_has_a_section_and_an_example() {
    let help = leasehold(&["--help"]);
    let from_help = schemes_in(&option_help(&help, "store"));
    for expected in [
        "sqlite", "azblob", "dynamodb", "postgres", "mysql", "redis", "etcd", "s3", "zk",
    ] {
        assert!(
            from_help.contains(expected),
            "{expected} is not in --store's help: {from_help:?}"
        );
    }
    let from_source = opener_schemes();
    assert!(
        from_source.contains("postgresql"),
        "the opener's schemes: {from_source:?}"
    );

    let doc = read("docs/cli.md");
    let headings: Vec<String> = sections(&section(&doc, "## Store URLs"))
        .into_iter()
        .map(|(h, _)| h)
        .collect();
    for scheme in from_help.iter().chain(&from_source) {
        assert!(
            headings.iter().any(|h| h.contains(&format!("`{scheme}:"))),
            "docs/cli.md has no section on {scheme}: URLs (headings: {headings:?})"
        );
    }

    let readme = read("README.md");
    let mut fenced = false;
    let mut examples = Vec::new();
    for line in readme.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        } else if fenced {
            examples.push(line);
        }
    }
    for scheme in &from_help {
        assert!(
            examples.iter().any(|l| {
                l.contains(" run ")
                    && l.match_indices(&format!("{scheme}:"))
                        .any(|(at, _)| at == 0 || !l.as_bytes()[at - 1].is_ascii_alphanumeric())
            }),
            "the README has no `leasehold run` example with a {scheme}: store"
        );
    }
}

/// The query parameters a store's URL parser accepts: the strings of the
/// list in the first `QuerySpec::new("STORE", &[...])` in `file`, or of the
/// list `const LIST: &[&str] = &[...]` it names (every store declares its
/// parameters so, for `leasehold::backend::params`).
fn spec_parameters(file: &str) -> BTreeSet<String> {
    let source = read(file);
    let start = source
        .find("QuerySpec::new(")
        .unwrap_or_else(|| panic!("no `QuerySpec::new(` in {file}"));
    let args = &source[start + "QuerySpec::new(".len()..];
    let args = &args[args.find(',').expect("a second argument") + 1..];
    let list = match args.trim_start().strip_prefix("&[") {
        Some(list) => list,
        None => {
            let name: String = args
                .trim_start()
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let decl = format!("const {name}: &[&str] = &[");
            let at = source
                .find(&decl)
                .unwrap_or_else(|| panic!("{file}: no `{decl}` for the QuerySpec's list"));
            &source[at + decl.len()..]
        }
    };
    let list = &list[..list.find(']').expect("the end of the parameter list")];
    between(list, '"').into_iter().collect()
}

/// The parameters a guide documents: the backquoted names in the first
/// cells of the table in its "## Store URL" section.
fn guide_parameters(guide: &str) -> BTreeSet<String> {
    first_cells(&section(&read(guide), "## Store URL"))
        .iter()
        .flat_map(|c| backquoted(c))
        .collect()
}

#[test]
fn every_url_parameter_is_in_its_stores_guide() {
    let stores = [
        (
            "docs/sqlite.md",
            spec_parameters("crates/leasehold/src/store.rs"),
        ),
        (
            "crates/leasehold-azure/README.md",
            spec_parameters("crates/leasehold-azure/src/builder.rs"),
        ),
        (
            "crates/leasehold-dynamodb/README.md",
            spec_parameters("crates/leasehold-dynamodb/src/url.rs"),
        ),
        (
            "crates/leasehold-postgres/README.md",
            spec_parameters("crates/leasehold-postgres/src/builder.rs"),
        ),
        (
            "crates/leasehold-redis/README.md",
            spec_parameters("crates/leasehold-redis/src/builder.rs"),
        ),
        (
            "crates/leasehold-etcd/README.md",
            spec_parameters("crates/leasehold-etcd/src/builder.rs"),
        ),
        (
            "crates/leasehold-s3/README.md",
            spec_parameters("crates/leasehold-s3/src/url.rs"),
        ),
    ];
    for (guide, accepted) in stores {
        assert!(
            accepted.contains("max_ttl"),
            "{guide}: the parameters read from the source look wrong: {accepted:?}"
        );
        let documented = guide_parameters(guide);
        let missing: Vec<_> = accepted.difference(&documented).collect();
        let unknown: Vec<_> = documented.difference(&accepted).collect();
        assert!(
            missing.is_empty() && unknown.is_empty(),
            "{guide}: parameters the store accepts but the guide does not document: {missing:?}; documented but not accepted: {unknown:?}"
        );
    }
}

/// Every object key in `value`, at any depth.
fn keys(value: &serde_json::Value, out: &mut BTreeSet<String>) {
    match value {
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                out.insert(k.clone());
                keys(v, out);
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| keys(v, out)),
        _ => {}
    }
}

/// The JSON the command prints: a held lock, a semaphore, a run that
/// succeeded and one skipped for it, on a SQLite file of its own.
#[test]
fn every_json_field_is_documented() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("leases.db").display());
    let json = |args: &[&str]| -> (serde_json::Value, Option<serde_json::Value>) {
        let out = Command::new(BIN)
            .args(["--store", &store])
            .args(args)
            .env_remove("LEASEHOLD_STORE")
            .output()
            .unwrap();
        let stdout = String::from_utf8(out.stdout).unwrap();
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert!(out.status.success(), "leasehold {args:?}: {stdout}{stderr}");
        let result = stderr
            .lines()
            .last()
            .and_then(|l| serde_json::from_str(l).ok());
        (serde_json::from_str(&stdout).unwrap_or_default(), result)
    };
    let mut printed = Vec::new();
    // `status` and `leader` run by CMD while the lock and the semaphore
    // are held; `run --json`'s last line.
    for (key, extra) in [("k", &["--once-per", "1h"]), ("s", &["--limit", "2"])] {
        let args = [
            &["run", key, "--json"][..],
            &["--owner", "o", "--data", "d"],
            extra,
            &["--", BIN, "--store", &store, "status", key, "--json"],
        ]
        .concat();
        let (status, result) = json(&args);
        printed.push(status);
        printed.push(result.expect("run --json prints a result line"));
    }
    // Skipped: the result carries the last success.
    let (_, skipped) = json(&["run", "k", "--json", "--once-per", "1h", "--", "true"]);
    printed.push(skipped.expect("run --json prints a result line"));
    printed.push(json(&["status", "k", "--json"]).0);
    printed.push(json(&["list", "--json"]).0);
    printed.push(json(&["leader", "k", "--json"]).0);

    // `fencing_tokens` is a map keyed by the run's keys, not fields.
    for v in &mut printed {
        if let Some(tokens) = v.get_mut("fencing_tokens") {
            assert!(tokens.is_object() || tokens.is_null(), "{tokens}");
            *tokens = serde_json::json!({});
        }
    }
    let mut fields = BTreeSet::new();
    printed.iter().for_each(|v| keys(v, &mut fields));
    for expected in [
        "fencing_tokens",
        "holder",
        "owner",
        "last_success",
        "slots",
        "result",
        "ttl_ms",
    ] {
        assert!(
            fields.contains(expected),
            "{expected} not printed: {printed:?}"
        );
    }
    let doc = section(&read("docs/cli.md"), "## JSON output");
    for field in fields {
        assert!(
            doc.contains(&format!("`{field}`")),
            "the JSON field `{field}` is not in docs/cli.md's JSON output section"
        );
    }
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces
/// as `-`.
fn slug(heading: &str) -> String {
    heading
        .trim_start_matches('#')
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(md: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for (heading, _) in sections(md).into_iter().skip(1) {
        let base = slug(&heading);
        let n = seen.entry(base.clone()).or_insert(0);
        out.insert(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    out
}

/// The Markdown files of the documentation: the README, `docs/` and every
/// crate's README.
fn markdown_files() -> Vec<PathBuf> {
    let root = root();
    let mut files = vec![root.join("README.md")];
    for dir in ["docs", "crates"] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "md") {
                files.push(path);
            } else if path.join("README.md").exists() {
                files.push(path.join("README.md"));
            }
        }
    }
    files.sort();
    files
}

#[test]
fn every_relative_link_resolves() {
    let files = markdown_files();
    assert!(files.len() >= 10, "{files:?}");
    let mut broken = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let mut fenced = false;
        for line in text.lines() {
            if line.starts_with("```") {
                fenced = !fenced;
            }
            if fenced {
                continue;
            }
            for (at, _) in line.match_indices("](") {
                let rest = &line[at + 2..];
                let Some(end) = rest.find(')') else { continue };
                let target = &rest[..end];
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
                let resolved = if path.is_empty() {
                    file.clone()
                } else {
                    file.parent().unwrap().join(path)
                };
                if !resolved.exists() {
                    broken.push(format!("{}: {target} (no such file)", file.display()));
                    continue;
                }
                if !anchor.is_empty() && resolved.extension().is_some_and(|e| e == "md") {
                    let target_text = std::fs::read_to_string(&resolved).unwrap();
                    if !anchors(&target_text).contains(anchor) {
                        broken.push(format!("{}: {target} (no such heading)", file.display()));
                    }
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_readme_stays_short() {
    let lines = read("README.md").lines().count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md has {lines} lines; keep it under {README_MAX_LINES} and move detail to docs/"
    );
}

#[test]
fn the_parsers_of_this_test_read_what_they_should() {
    assert_eq!(
        named_options("run `--ttl 30s`, --once-per=12h, a -- b, x--y"),
        ["once-per", "ttl"].map(String::from).into()
    );
    assert_eq!(
        named_commands(
            "`leasehold [--store URL] [-v] run KEY`, `leasehold help [COMMAND]`\n```\n0 2 * * * leasehold --store s:// status k\n```\n`leasehold COMMAND --help`, leasehold list"
        ),
        ["help", "run", "status"].map(String::from).into()
    );
    assert_eq!(
        named_commands("a `span over\na line` and leasehold uses `leasehold break`"),
        ["break"].map(String::from).into()
    );
    assert_eq!(
        schemes_in(
            "sqlite:PATH, sqlite:///A, azblob://C (rediss:// for TLS); store: a, Default: x"
        ),
        ["azblob", "rediss", "sqlite"].map(String::from).into()
    );
    assert_eq!(
        slug("### Once per period: `run --once-per`"),
        "once-per-period-run---once-per"
    );
    assert_eq!(
        slug("## Store epochs: when the store's data is lost"),
        "store-epochs-when-the-stores-data-is-lost"
    );
}
