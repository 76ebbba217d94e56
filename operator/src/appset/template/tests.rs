//! Go template and renderer tests: each expected output is what Go's `text/template` with
//! Sprig prints for the same template and data.

use serde_json::{json, Value};

use super::go::{render, GoOptions, MissingKey};
use super::Renderer;
use crate::appset::params::{normalize_numbers, ParamSet};

fn data() -> Value {
    let mut v = json!({
        "name": "Engineering_Dev",
        "server": "https://1.2.3.4",
        "replicas": 3,
        "big": 1_000_000,
        "enabled": true,
        "empty": "",
        "nothing": null,
        "path": {"path": "apps/guestbook", "basename": "guestbook", "segments": ["apps", "guestbook"]},
        "metadata": {"labels": {"env": "prod", "team": "web"}},
        "list": ["a", "b", "c"],
    });
    normalize_numbers(&mut v);
    v
}

fn run(template: &str) -> String {
    render(template, &data(), &GoOptions::default()).unwrap_or_else(|e| panic!("{template}: {e}"))
}

fn run_err(template: &str, missing: MissingKey) -> String {
    let options = GoOptions {
        missing_key: missing,
        ..GoOptions::default()
    };
    render(template, &data(), &options).expect_err(template)
}

#[test]
fn field_access_and_printing() {
    assert_eq!(run("{{.path.basename}}"), "guestbook");
    assert_eq!(run("{{ .metadata.labels.env }}"), "prod");
    assert_eq!(run("{{.replicas}} {{.big}} {{.enabled}}"), "3 1e+06 true");
    assert_eq!(
        run("{{.list}} {{.metadata}}"),
        "[a b c] map[labels:map[env:prod team:web]]"
    );
    assert_eq!(run("{{.missing}}|{{.nothing}}"), "<no value>|<no value>");
    assert_eq!(
        run("{{$.name}}{{with .path}}{{.basename}}{{end}}"),
        "Engineering_Devguestbook"
    );
}

#[test]
fn missing_keys_follow_the_option() {
    assert_eq!(
        run_err("{{.region}}", MissingKey::Error),
        "map has no entry for key \"region\""
    );
    assert!(run_err("{{.metadata.labels.region}}", MissingKey::Error).contains("map has no entry for key \"region\""));
    assert_eq!(run("{{.missing.deeper}}"), "<no value>");
    assert!(run_err("{{.nothing.x}}", MissingKey::Default).contains("nil pointer evaluating interface {}.x"));
    assert!(run_err("{{.name.x}}", MissingKey::Default).contains("can't evaluate field x in type string"));
    // `index` yields nil for a missing key even with missingkey=error, as in Go.
    let options = GoOptions {
        missing_key: MissingKey::Error,
        ..GoOptions::default()
    };
    assert_eq!(
        render("{{index .metadata.labels \"region\"}}", &data(), &options).unwrap(),
        "<no value>"
    );
}

#[test]
fn control_structures() {
    assert_eq!(run("{{if .enabled}}on{{else}}off{{end}}"), "on");
    assert_eq!(run("{{if .empty}}a{{else if eq .replicas 3.0}}b{{else}}c{{end}}"), "b");
    assert_eq!(run("{{range .list}}[{{.}}]{{end}}"), "[a][b][c]");
    assert_eq!(run("{{range $i, $v := .list}}{{$i}}={{$v}};{{end}}"), "0=a;1=b;2=c;");
    assert_eq!(
        run("{{range $k, $v := .metadata.labels}}{{$k}}:{{$v}} {{end}}"),
        "env:prod team:web "
    );
    assert_eq!(run("{{range .none}}x{{else}}empty{{end}}"), "empty");
    assert_eq!(run("{{range .list}}{{if eq . \"b\"}}{{break}}{{end}}{{.}}{{end}}"), "a");
    assert_eq!(
        run("{{range .list}}{{if eq . \"b\"}}{{continue}}{{end}}{{.}}{{end}}"),
        "ac"
    );
    assert_eq!(
        run("{{with .missing}}x{{else with .path}}{{.basename}}{{end}}"),
        "guestbook"
    );
    assert_eq!(run("{{$x := \"a\"}}{{if true}}{{$x = \"b\"}}{{end}}{{$x}}"), "b");
}

#[test]
fn trim_markers_and_comments() {
    assert_eq!(run("a  {{- .path.basename -}}  b"), "aguestbookb");
    assert_eq!(run("a {{/* comment */}} b"), "a  b");
    assert_eq!(run("a {{- /* comment */ -}} b"), "ab");
    assert_eq!(run("{{ -3 }}"), "-3");
    assert_eq!(run("{{ .5 }} {{ 0x1F }} {{ 1_000 }} {{ 'a' }}"), "0.5 31 1000 97");
}

#[test]
fn pipelines_and_functions() {
    assert_eq!(run("{{.name | normalize}}"), "engineering-dev");
    assert_eq!(run("{{.name | lower | replace \"_\" \"-\"}}"), "engineering-dev");
    assert_eq!(run("{{upper .path.basename}}"), "GUESTBOOK");
    assert_eq!(
        run("{{.missing | default \"fallback\"}} {{.empty | default \"x\"}}"),
        "fallback x"
    );
    assert_eq!(
        run("{{trunc 5 .path.basename}} {{trunc -4 .path.basename}}"),
        "guest book"
    );
    assert_eq!(
        run("{{join \",\" .list}} {{join \"/\" .path.segments}}"),
        "a,b,c apps/guestbook"
    );
    assert_eq!(
        run("{{toJson .metadata.labels}} {{toJson .replicas}}"),
        "{\"env\":\"prod\",\"team\":\"web\"} 3"
    );
    assert_eq!(
        run("{{quote .path.basename}} {{squote .path.basename}}"),
        "\"guestbook\" 'guestbook'"
    );
    assert_eq!(
        run("{{printf \"%s-%d-%v-%05.1f\" .path.basename 7 .replicas 2.25}}"),
        "guestbook-7-3-002.2"
    );
    assert_eq!(run("{{printf \"%d\" .replicas}}"), "%!d(float64=3)");
    assert_eq!(
        run("{{and .enabled .empty}}|{{or .empty .name}}|{{not .enabled}}"),
        "|Engineering_Dev|false"
    );
    assert_eq!(
        run("{{if and (eq .metadata.labels.env \"prod\") (gt .replicas 2.0)}}yes{{end}}"),
        "yes"
    );
    assert_eq!(
        run("{{ne .name \"x\"}} {{lt 1 2}} {{ge \"b\" \"a\"}}"),
        "true true true"
    );
    assert_eq!(
        run("{{trim \"  x \"}}{{trimPrefix \"apps/\" .path.path}}{{trimSuffix \"book\" .path.basename}}"),
        "xguestbookguest"
    );
    assert_eq!(
        run("{{hasPrefix \"apps\" .path.path}} {{hasSuffix \"x\" .path.path}}"),
        "true false"
    );
    assert_eq!(
        run("{{(split \"/\" .path.path)._1}} {{index (splitList \"/\" .path.path) 0}}"),
        "guestbook apps"
    );
    assert_eq!(run("{{b64enc \"hello\"}} {{b64dec \"aGVsbG8=\"}}"), "aGVsbG8= hello");
    assert_eq!(
        run("{{index .path.segments 1}} {{len .list}} {{index .metadata.labels \"team\"}}"),
        "guestbook 3 web"
    );
    assert_eq!(run("{{slugify \"Hello World.Example\"}}"), "hello-world-example");
    assert_eq!(run("{{toYaml .metadata.labels}}"), "env: prod\nteam: web");
    assert_eq!(run("{{(fromYaml \"a: 1\").a}}"), "1");
    assert_eq!(
        run("{{add 1 2}} {{sub 5 .replicas}} {{ternary \"a\" \"b\" .enabled}}"),
        "3 2 a"
    );
    assert_eq!(run("{{dict \"a\" 1 \"b\" \"x\" | toJson}}"), "{\"a\":1,\"b\":\"x\"}");
    assert_eq!(
        run("{{list 1 \"a\" | toJson}} {{\"<&>\" | toJson}} {{\"<&>\" | toRawJson}}"),
        "[1,\"a\"] \"\\u003c\\u0026\\u003e\" \"<&>\""
    );
}

#[test]
fn errors_are_reported_not_panics() {
    for bad in [
        "{{",
        "{{.a",
        "{{if .a}}x",
        "{{end}}",
        "{{nosuchfunc .a}}",
        "{{.a | }}",
        "{{(.a}}",
        "{{\"x}}",
        "{{define \"x\"}}{{end}}",
        "{{ .5x }}",
        "{{ 1.2.3 }}",
        "{{ $undefined }}",
        "{{ else }}",
    ] {
        assert!(render(bad, &data(), &GoOptions::default()).is_err(), "{bad}");
    }
    assert!(run_err("{{lower .replicas}}", MissingKey::Default).contains("expected string"));
    assert!(run_err("{{div 1 0}}", MissingKey::Default).contains("divide by zero"));
    assert!(run_err("{{fail \"stop\"}}", MissingKey::Default).contains("stop"));
}

#[test]
fn execution_is_bounded() {
    let options = GoOptions {
        max_steps: 1_000,
        ..GoOptions::default()
    };
    let err = render("{{range 100000}}x{{end}}", &data(), &options).unwrap_err();
    assert!(err.contains("steps"), "{err}");
    let options = GoOptions {
        max_output: 10,
        ..GoOptions::default()
    };
    assert!(render("{{range 100}}xx{{end}}", &data(), &options)
        .unwrap_err()
        .contains("output"));
    assert!(render("{{repeat 1000 \"abc\"}}", &data(), &options).is_err());
    // Work that copies or grows values is charged too.
    let options = GoOptions {
        max_output: 1 << 16,
        ..GoOptions::default()
    };
    assert!(render(
        "{{replace \"\" (repeat 1000 \"y\") (repeat 1000 \"x\")}}",
        &data(),
        &options
    )
    .is_err());
    assert!(render("{{indent 1000 (repeat 60000 \"\\n\")}}", &data(), &options).is_err());
    assert!(render(
        "{{printf \"%10000d%10000d%10000d%10000d%10000d%10000d%10000d\" 1 2 3 4 5 6 7}}",
        &data(),
        &options
    )
    .is_err());
    let grow = "{{$l := list}}{{range 100000}}{{$l = append $l .}}{{end}}{{len $l}}";
    assert!(render(grow, &data(), &GoOptions::default())
        .unwrap_err()
        .contains("steps"));
    let mut big = data();
    big["blob"] = Value::Array((0..50_000).map(Value::from).collect());
    let copies = "{{range 100000}}{{$x := $.blob}}{{end}}";
    assert!(render(copies, &big, &GoOptions::default())
        .unwrap_err()
        .contains("steps"));
    let deep = format!("{}x{}", "{{if true}}".repeat(200), "{{end}}".repeat(200));
    assert!(render(&deep, &data(), &GoOptions::default())
        .unwrap_err()
        .contains("nested"));
    let parens = format!("{{{{{}1{}}}}}", "(".repeat(500), ")".repeat(500));
    assert!(render(&parens, &data(), &GoOptions::default()).is_err());
}

#[test]
fn renderer_templates_strings_and_keys() {
    let params: ParamSet = data().as_object().cloned().unwrap_or_default();
    let renderer = Renderer::new(true, &["missingkey=error".to_owned()], GoOptions::default()).unwrap();
    let template = json!({"metadata": {"labels": {"team-{{.metadata.labels.team}}": "{{.path.basename}}"}}, "n": 3});
    let out = renderer.render_value(&template, &params).unwrap();
    assert_eq!(out, json!({"metadata": {"labels": {"team-web": "guestbook"}}, "n": 3}));
    assert!(Renderer::new(true, &["missingkey=bogus".to_owned()], GoOptions::default()).is_err());
}

#[test]
fn mutated_templates_never_panic_or_hang() {
    let seeds = [
        "{{ if and (eq .a \"x\") .b }}{{ range $i, $v := .list }}{{ $i }}{{ printf \"%5.2f\" 1.5 }}{{ end }}{{ end }}",
        "{{- with .path -}}{{ .basename | upper | trunc -3 }}{{ else }}{{ toJson . }}{{ end -}}",
        "{{/* c */}}{{ index .m \"k\" 0 }}{{ (split \"/\" .p)._0 }}{{ 'x' }}{{ `raw` }}",
    ];
    let alphabet: Vec<char> = "{}()|$.\"'`-/* ,:=abx0129\\\n".chars().collect();
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for seed in seeds {
        for _ in 0..400 {
            let mut chars: Vec<char> = seed.chars().collect();
            for _ in 0..3 {
                let pos = (next() as usize) % chars.len();
                match next() % 3 {
                    0 => chars[pos] = alphabet[(next() as usize) % alphabet.len()],
                    1 => chars.insert(pos, alphabet[(next() as usize) % alphabet.len()]),
                    _ => {
                        chars.remove(pos);
                    }
                }
            }
            let template: String = chars.into_iter().collect();
            let _ = render(
                &template,
                &data(),
                &GoOptions {
                    max_steps: 10_000,
                    ..GoOptions::default()
                },
            );
        }
    }
}
