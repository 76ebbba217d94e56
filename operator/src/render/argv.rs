//! The one place each external tool's command line is built, and the rules that keep every field a user
//! controls from becoming an option of the tool. Pure.
//!
//! Capstan runs two tools, `helm template` and `kustomize build` (or `kubectl kustomize`); Git is libgit2
//! in process, never a `git` command. Their argv is built here and nowhere else, by construction:
//! - every value travels inside its own flag as `--flag=value`, so a value starting with `-` stays a value;
//! - positionals (the release name, the chart or kustomization directory) come after `--`, where both tools
//!   stop reading options; directories are absolute paths inside the checkout or a private copy;
//! - what a tool parses *inside* a value is checked too, because that is where one field can become two:
//!   Helm splits `--set`/`--set-file` at an unescaped `,` and reads the key up to `=` (so a parameter name
//!   must be a Helm value path), and splits `--values`/`--api-versions` at `,` (so those may not hold one).
//!
//! A field that breaks a rule is an [`RenderError::InvalidSpec`] naming the field; nothing runs.
//! [`check_source`] applies the rules of the Application's own fields before anything is fetched, and the
//! argv builders apply them again with the resolved paths, so no caller can skip them.
//!
//! Kustomize options never reach an argv: they are written as YAML data into the (private copy of the)
//! kustomization, see `kustomize.rs`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::{HelmOptions, KustomizeBinary, RenderError, SourceOptions};
use crate::api::names::{is_dns1123_label, is_dns1123_subdomain};
use crate::text::truncate;

/// Helm's bound on a release name (`chartutil.ValidateReleaseName`).
pub const MAX_RELEASE_NAME_LEN: usize = 53;
/// Longest parameter name accepted.
pub const MAX_KEY_PATH_LEN: usize = 1024;
/// Helm's bound on a list index in a `--set` path (`strvals.MaxIndex`).
pub const MAX_INDEX: u32 = 65_536;
/// Longest `kubeVersion` or `apiVersions` entry accepted.
const MAX_VERSION_LEN: usize = 253;

/// The inputs of one `helm template` run, with every path already resolved.
#[derive(Clone, Debug, PartialEq)]
pub struct TemplateArgs {
    pub release_name: String,
    pub namespace: String,
    pub chart_dir: PathBuf,
    pub value_files: Vec<PathBuf>,
    /// The file holding `values`/`valuesObject`, if any.
    pub inline_values_file: Option<PathBuf>,
    /// `(name, resolved path)` for `--set-file`.
    pub file_parameters: Vec<(String, PathBuf)>,
}

fn invalid(field: &str, value: &str, why: &str) -> RenderError {
    RenderError::InvalidSpec(format!("{field} {:?} {why}", truncate(value, 100)))
}

/// Checks the fields of a source that reach a tool's command line, before anything is fetched:
/// `app_name` and `destination_namespace` stand in for an unset `helm.releaseName` / `helm.namespace`.
pub fn check_source(source: &SourceOptions, app_name: &str, destination_namespace: &str) -> Result<(), RenderError> {
    match &source.helm {
        Some(helm) => check_helm(helm, app_name, destination_namespace),
        None => Ok(()),
    }
}

/// The rules of every Helm field a user writes (not the paths, which are checked once resolved).
pub fn check_helm(options: &HelmOptions, app_name: &str, destination_namespace: &str) -> Result<(), RenderError> {
    check_release_name(&release_name(options, app_name), options.release_name.is_empty())?;
    check_namespace(options, destination_namespace)?;
    if !options.kube_version.is_empty() {
        check_version("helm.kubeVersion", &options.kube_version, false)?;
    }
    for (i, api) in options.api_versions.iter().enumerate() {
        check_version(&format!("helm.apiVersions[{i}]"), api, true)?;
    }
    for (i, p) in options.parameters.iter().enumerate() {
        check_key_path(&format!("helm.parameters[{i}].name"), &p.name)?;
        if p.value.contains('\0') {
            return Err(invalid(
                &format!("helm.parameters[{i}].value"),
                "",
                "holds a NUL character",
            ));
        }
    }
    for (i, p) in options.file_parameters.iter().enumerate() {
        check_key_path(&format!("helm.fileParameters[{i}].name"), &p.name)?;
    }
    Ok(())
}

/// `helm.releaseName`, else the Application's name (Argo CD's default).
pub fn release_name(options: &HelmOptions, app_name: &str) -> String {
    if options.release_name.is_empty() {
        app_name.to_string()
    } else {
        options.release_name.clone()
    }
}

/// `helm.namespace`, else the destination namespace.
pub fn helm_namespace(options: &HelmOptions, destination_namespace: &str) -> String {
    if options.namespace.is_empty() {
        destination_namespace.to_string()
    } else {
        options.namespace.clone()
    }
}

/// Helm's own rule for a release name: a DNS-1123 subdomain of at most 53 characters.
fn check_release_name(name: &str, defaulted: bool) -> Result<(), RenderError> {
    if name.len() <= MAX_RELEASE_NAME_LEN && is_dns1123_subdomain(name) {
        return Ok(());
    }
    let rule = "is not a Helm release name (a DNS-1123 subdomain of at most 53 characters)";
    if defaulted {
        return Err(invalid(
            "helm.releaseName is unset and the Application name",
            name,
            &format!("that stands in for it {rule}; set helm.releaseName"),
        ));
    }
    Err(invalid("helm.releaseName", name, rule))
}

fn check_namespace(options: &HelmOptions, destination_namespace: &str) -> Result<(), RenderError> {
    let (field, ns) = if options.namespace.is_empty() {
        ("destination.namespace", destination_namespace)
    } else {
        ("helm.namespace", options.namespace.as_str())
    };
    if ns.is_empty() || is_dns1123_label(ns) {
        Ok(())
    } else {
        Err(invalid(field, ns, "is not a namespace name (a DNS-1123 label)"))
    }
}

/// A Kubernetes version (`v1.33.1`, `1.33`) or an API version (`apps/v1`, `example.com/v1/Widget`):
/// letters, digits, `.`, `+`, `-` (and `/` for API versions), starting with a letter or digit. No `,`:
/// Helm splits both flags' values there.
fn check_version(field: &str, value: &str, api: bool) -> Result<(), RenderError> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '+' | '-') || (api && c == '/');
    let starts_well = value.starts_with(|c: char| c.is_ascii_alphanumeric());
    if value.len() <= MAX_VERSION_LEN && starts_well && value.chars().all(allowed) {
        return Ok(());
    }
    let what = if api {
        "is not an API version (group/version or group/version/Kind)"
    } else {
        "is not a Kubernetes version (like v1.33.0)"
    };
    Err(invalid(field, value, what))
}

/// A Helm value path as `--set` reads it: keys separated by `.`, each optionally followed by list indexes
/// `[N]` (N ≤ 65536, Helm's bound). A key may hold `\.` (a literal dot, as in
/// `ingress.annotations.kubernetes\.io/ingress\.class`) but no `,` (Helm would start another assignment
/// there), no `=` (the key would end there), no `[`/`]` outside an index, no braces, no other `\`, no
/// whitespace or control characters; the path may not start with `-`.
pub fn check_key_path(field: &str, name: &str) -> Result<(), RenderError> {
    let fail = |why: String| invalid(field, name, &format!("is not a Helm value path: {why}"));
    if name.is_empty() {
        return Err(fail("it is empty".into()));
    }
    if name.len() > MAX_KEY_PATH_LEN {
        return Err(fail("it is longer than 1024 bytes".into()));
    }
    if name.starts_with('-') {
        return Err(fail("it starts with '-'".into()));
    }
    let chars: Vec<char> = name.chars().collect();
    let mut i = 0;
    loop {
        i = key_end(&chars, i).map_err(fail)?;
        while chars.get(i) == Some(&'[') {
            i = index_end(&chars, i).map_err(fail)?;
        }
        match chars.get(i) {
            None => return Ok(()),
            Some('.') => i += 1,
            Some(c) => return Err(fail(format!("{c:?} after a list index"))),
        }
    }
}

/// The end of the key starting at `start` (at the next `.`, `[` or the end); the key is not empty.
fn key_end(chars: &[char], start: usize) -> Result<usize, String> {
    let mut i = start;
    while let Some(&c) = chars.get(i) {
        match c {
            '.' | '[' => break,
            '\\' if chars.get(i + 1) == Some(&'.') => i += 1,
            '\\' => return Err("'\\' may only escape '.'".into()),
            ',' | '=' | ']' | '{' | '}' => return Err(format!("{c:?} is not allowed in a key")),
            c if c.is_whitespace() || c.is_control() => {
                return Err("whitespace and control characters are not allowed".into())
            }
            _ => {}
        }
        i += 1;
    }
    if i == start {
        return Err("a key is empty".into());
    }
    Ok(i)
}

/// The position after the `[N]` index opening at `open`.
fn index_end(chars: &[char], open: usize) -> Result<usize, String> {
    let close = chars[open..]
        .iter()
        .position(|c| *c == ']')
        .map(|p| open + p)
        .ok_or("an unclosed '['")?;
    let digits: String = chars[open + 1..close].iter().collect();
    let index = (!digits.is_empty() && digits.len() <= 5 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse::<u32>().ok())
        .flatten()
        .filter(|n| *n <= MAX_INDEX);
    match index {
        Some(_) => Ok(close + 1),
        None => Err(format!("a list index is a number from 0 to {MAX_INDEX}")),
    }
}

/// A resolved path Helm reads a list of from one flag value (`--values`): a `,` or `"` would split or
/// quote it (Helm parses those flags as CSV), a control character end it.
fn check_listed_path(field: &str, path: &Path) -> Result<(), RenderError> {
    check_path_chars(field, path, &[',', '"'])
}

/// The resolved path of a `--set-file` value: Helm's parser ends the value at an unescaped `,` and reads
/// `\` as an escape.
fn check_set_file_path(field: &str, path: &Path) -> Result<(), RenderError> {
    check_path_chars(field, path, &[',', '\\'])
}

fn check_path_chars(field: &str, path: &Path, special: &[char]) -> Result<(), RenderError> {
    let Some(text) = path.to_str() else {
        return Err(RenderError::InvalidSpec(format!("{field}: the path is not UTF-8")));
    };
    match text.chars().find(|c| special.contains(c) || c.is_control()) {
        // The message names the field, never the server-side path.
        Some(c) => Err(RenderError::InvalidSpec(format!(
            "{field}: a file whose path holds {c:?} cannot be passed to helm"
        ))),
        None => Ok(()),
    }
}

fn flag(name: &str, value: impl Into<OsString>) -> OsString {
    let mut arg = OsString::from(format!("--{name}="));
    arg.push(value.into());
    arg
}

/// The argv of `helm template` (after the program). Every user field is checked first ([`check_helm`]),
/// then the resolved paths; values ride inside `--flag=value`, positionals follow `--`.
pub fn helm_template(
    options: &HelmOptions,
    args: &TemplateArgs,
    app_name: &str,
    destination_namespace: &str,
) -> Result<Vec<OsString>, RenderError> {
    check_helm(options, app_name, destination_namespace)?;
    let mut argv: Vec<OsString> = vec!["template".into()];
    if !args.namespace.is_empty() {
        argv.push(flag("namespace", &args.namespace));
    }
    if !options.kube_version.is_empty() {
        argv.push(flag("kube-version", &options.kube_version));
    }
    argv.extend(options.api_versions.iter().map(|api| flag("api-versions", api)));
    for (i, file) in args.value_files.iter().enumerate() {
        check_listed_path(&format!("helm.valueFiles[{i}]"), file)?;
        argv.push(flag("values", file));
    }
    if let Some(file) = &args.inline_values_file {
        check_listed_path("helm.values", file)?;
        argv.push(flag("values", file));
    }
    for p in &options.parameters {
        let name = if p.force_string { "set-string" } else { "set" };
        argv.push(flag(name, format!("{}={}", p.name, clean_set_value(&p.value))));
    }
    for (i, (name, path)) in args.file_parameters.iter().enumerate() {
        check_set_file_path(&format!("helm.fileParameters[{i}].path"), path)?;
        let mut value = OsString::from(format!("{name}="));
        value.push(path);
        argv.push(flag("set-file", value));
    }
    argv.push(
        if options.skip_crds {
            "--skip-crds"
        } else {
            "--include-crds"
        }
        .into(),
    );
    argv.extend([
        "--".into(),
        args.release_name.clone().into(),
        absolute(&args.chart_dir)?,
    ]);
    Ok(argv)
}

/// Argo CD's `cleanSetParameters`: escape unescaped commas unless the value is a `{list}`, so a
/// value with commas stays one value.
pub fn clean_set_value(value: &str) -> String {
    if value.starts_with('{') && value.ends_with('}') {
        return value.to_string();
    }
    let mut out = String::with_capacity(value.len());
    let mut previous = None;
    for c in value.chars() {
        if c == ',' && previous != Some('\\') {
            out.push('\\');
        }
        out.push(c);
        previous = Some(c);
    }
    out
}

/// The argv of a Kustomize build (after the program): `<configured args> --load-restrictor=
/// LoadRestrictionsRootOnly -- DIR`.
pub fn kustomize_build(binary: &KustomizeBinary, dir: &Path) -> Result<Vec<OsString>, RenderError> {
    let mut argv: Vec<OsString> = binary.args.iter().map(OsString::from).collect();
    argv.extend([
        "--load-restrictor=LoadRestrictionsRootOnly".into(),
        "--".into(),
        absolute(dir)?,
    ]);
    Ok(argv)
}

/// A directory handed to a tool: always absolute (inside the checkout or a private copy), so it can
/// never read as an option even where `--` is not honoured.
fn absolute(dir: &Path) -> Result<OsString, RenderError> {
    if dir.is_absolute() {
        Ok(dir.as_os_str().to_os_string())
    } else {
        Err(RenderError::InvalidPath("a tool was given a relative directory".into()))
    }
}

/// The argv printing a tool's version (no user input).
pub fn helm_version() -> Vec<String> {
    vec!["version".into(), "--short".into()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::{ErrorCategory, HelmFileParameter, HelmParameter};

    fn args() -> TemplateArgs {
        TemplateArgs {
            release_name: "r".into(),
            namespace: "ns".into(),
            chart_dir: "/c".into(),
            value_files: vec!["/c/v.yaml".into()],
            inline_values_file: Some("/t/i.yaml".into()),
            file_parameters: vec![("f".into(), "/c/f.txt".into())],
        }
    }

    fn strings(argv: Vec<OsString>) -> Vec<String> {
        argv.into_iter().map(|a| a.into_string().unwrap()).collect()
    }

    fn param(name: &str, value: &str) -> HelmParameter {
        HelmParameter {
            name: name.into(),
            value: value.into(),
            force_string: false,
        }
    }

    /// The field an InvalidSpec error names, for the tables below.
    fn refused(result: Result<(), RenderError>) -> String {
        let err = result.expect_err("refused");
        assert_eq!(err.category(), ErrorCategory::InvalidSpec, "{err}");
        err.to_string()
    }

    #[test]
    fn values_ride_inside_their_flags_and_positionals_follow_the_double_dash() {
        let options = HelmOptions {
            parameters: vec![
                param("x", "a,b"),
                HelmParameter {
                    name: "y".into(),
                    value: "{1,2}".into(),
                    force_string: true,
                },
            ],
            api_versions: vec!["foo/v1".into()],
            kube_version: "v1.33.0".into(),
            ..Default::default()
        };
        let argv = strings(helm_template(&options, &args(), "app", "ns").unwrap());
        assert_eq!(
            argv,
            [
                "template",
                "--namespace=ns",
                "--kube-version=v1.33.0",
                "--api-versions=foo/v1",
                "--values=/c/v.yaml",
                "--values=/t/i.yaml",
                "--set=x=a\\,b",
                "--set-string=y={1,2}",
                "--set-file=f=/c/f.txt",
                "--include-crds",
                "--",
                "r",
                "/c"
            ]
        );
        assert_eq!(clean_set_value("a\\,b,c"), "a\\,b\\,c");
        let kustomize = strings(kustomize_build(&KustomizeBinary::default(), Path::new("/w/app")).unwrap());
        assert_eq!(
            kustomize,
            [
                "kustomize",
                "--load-restrictor=LoadRestrictionsRootOnly",
                "--",
                "/w/app"
            ]
        );
        assert!(kustomize_build(&KustomizeBinary::default(), Path::new("-x")).is_err());
    }

    #[test]
    fn release_names_follow_helms_rule() {
        let check = |name: &str| {
            let options = HelmOptions {
                release_name: name.into(),
                ..Default::default()
            };
            check_helm(&options, "app", "ns")
        };
        for good in ["web", "web-1", "web.v2", &"a".repeat(53)] {
            assert_eq!(check(good), Ok(()), "{good}");
        }
        for bad in [
            "--set-file=leak=/var/run/secrets/kubernetes.io/serviceaccount/token",
            "--values=/etc/passwd",
            "-x",
            "Web",
            "web_1",
            "web 1",
            "web/1",
            "web-",
            &"a".repeat(54),
        ] {
            assert!(refused(check(bad)).starts_with("helm.releaseName"), "{bad}");
        }
        // Unset, the Application's name stands in, under the same rule.
        let long_app = "a".repeat(60);
        let said = refused(check_helm(&HelmOptions::default(), &long_app, "ns"));
        assert!(said.contains("set helm.releaseName"), "{said}");
        assert_eq!(check_helm(&HelmOptions::default(), "app", "ns"), Ok(()));
    }

    /// devcluster runs no CEL, so the generated CRD's rule for `releaseName` is read here and evaluated
    /// (its regular expression and length bounds) against the controller's check: both accept or both refuse.
    #[test]
    fn the_crd_rule_for_release_names_and_the_controller_agree() {
        let crd = crate::api::crds()
            .into_iter()
            .find(|c| c.spec.names.kind == "Application")
            .expect("the Application CRD");
        let schema = serde_json::to_value(&crd.spec.versions[0].schema).expect("serialises");
        let node = &schema["openAPIV3Schema"]["properties"]["spec"]["properties"]["source"]["properties"]["helm"]
            ["properties"]["releaseName"];
        let rule = node["x-kubernetes-validations"][0]["rule"]
            .as_str()
            .expect("a CEL rule");
        let pattern = crate::api::names::DNS1123_SUBDOMAIN_REGEX;
        assert_eq!(
            rule,
            format!("self == '' || self.matches('{pattern}')"),
            "empty means unset"
        );
        let re = regex::Regex::new(pattern).unwrap();
        let max = node["maxLength"].as_u64().expect("maxLength") as usize;
        assert_eq!(max, MAX_RELEASE_NAME_LEN);
        for name in [
            "web",
            "web.v2",
            "a-b.c-d",
            &"a".repeat(53),
            &"a".repeat(54),
            "-web",
            "web.",
            "Web",
            "--set-file=leak=/etc/passwd",
            "a..b",
            "a b",
        ] {
            let crd_accepts = name.len() <= max && re.is_match(name);
            assert_eq!(crd_accepts, check_release_name(name, false).is_ok(), "{name:?}");
        }
    }

    #[test]
    fn parameter_and_file_parameter_names_are_helm_value_paths() {
        let good = [
            "image.tag",
            "replicas",
            "servers[0].port",
            "matrix[1][2]",
            "ingress.annotations.kubernetes\\.io/ingress\\.class",
            "global.labels.app\\.kubernetes\\.io/name",
            "a_b.c-d.E9",
            "list[65536]",
        ];
        let bad = [
            "leak,other=/etc/passwd",
            "a=b",
            "-a",
            "--set-file",
            "a b",
            "a\tb",
            "a\nb",
            "",
            "a..b",
            ".a",
            "a.",
            "a[",
            "a[]",
            "a[x]",
            "a[-1]",
            "a[65537]",
            "a[0]b",
            "a]b",
            "a\\b",
            "a{b}",
            "[0]",
        ];
        for (field, make) in [
            (
                "helm.parameters[0].name",
                Box::new(|n: &str| HelmOptions {
                    parameters: vec![param(n, "v")],
                    ..Default::default()
                }) as Box<dyn Fn(&str) -> HelmOptions>,
            ),
            (
                "helm.fileParameters[0].name",
                Box::new(|n: &str| HelmOptions {
                    file_parameters: vec![HelmFileParameter {
                        name: n.into(),
                        path: "f.txt".into(),
                    }],
                    ..Default::default()
                }),
            ),
        ] {
            for name in good {
                assert_eq!(check_helm(&make(name), "app", "ns"), Ok(()), "{field} {name}");
            }
            for name in bad {
                let said = refused(check_helm(&make(name), "app", "ns"));
                assert!(said.starts_with(field), "{name:?}: {said}");
            }
            let long = "a".repeat(MAX_KEY_PATH_LEN + 1);
            assert!(refused(check_helm(&make(&long), "app", "ns")).starts_with(field));
        }
        let nul = HelmOptions {
            parameters: vec![param("a", "x\0y")],
            ..Default::default()
        };
        assert!(refused(check_helm(&nul, "app", "ns")).starts_with("helm.parameters[0].value"));
    }

    #[test]
    fn namespaces_and_versions_cannot_smuggle_anything() {
        let with = |f: &dyn Fn(&mut HelmOptions)| {
            let mut o = HelmOptions::default();
            f(&mut o);
            o
        };
        assert_eq!(check_helm(&HelmOptions::default(), "app", ""), Ok(()));
        let said = refused(check_helm(&HelmOptions::default(), "app", "--kubeconfig=/x"));
        assert!(said.starts_with("destination.namespace"), "{said}");
        let said = refused(check_helm(&with(&|o| o.namespace = "a/b".into()), "app", "ns"));
        assert!(said.starts_with("helm.namespace"), "{said}");
        for good in ["v1.33.0", "1.33", "v1.30.0-rc.1+k3s1"] {
            assert_eq!(
                check_helm(&with(&|o| o.kube_version = good.into()), "app", "ns"),
                Ok(())
            );
        }
        for bad in ["--x", "1.2,3", "v1 2", "-1"] {
            let said = refused(check_helm(&with(&|o| o.kube_version = bad.into()), "app", "ns"));
            assert!(said.starts_with("helm.kubeVersion"), "{bad}: {said}");
        }
        for good in ["apps/v1", "v1", "example.com/v1/Widget", "policy/v1beta1"] {
            assert_eq!(
                check_helm(&with(&|o| o.api_versions = vec![good.into()]), "app", "ns"),
                Ok(())
            );
        }
        for bad in ["apps/v1,batch/v1", "--x", "/v1", "a b"] {
            let said = refused(check_helm(&with(&|o| o.api_versions = vec![bad.into()]), "app", "ns"));
            assert!(said.starts_with("helm.apiVersions[0]"), "{bad}: {said}");
        }
    }

    #[test]
    fn resolved_paths_that_helm_would_split_are_refused() {
        let options = HelmOptions::default();
        let mut a = args();
        a.value_files = vec!["/c/x,/etc/passwd".into()];
        let err = helm_template(&options, &a, "app", "ns").unwrap_err();
        assert!(err.to_string().starts_with("helm.valueFiles[0]"), "{err}");
        assert!(!err.to_string().contains("/etc/passwd"), "no server path: {err}");
        let mut a = args();
        a.value_files = vec!["/c/\"q\".yaml".into()];
        assert!(helm_template(&options, &a, "app", "ns").is_err());
        let mut a = args();
        a.file_parameters = vec![("f".into(), "/c/dir,leak=/etc/passwd".into())];
        let err = helm_template(&options, &a, "app", "ns").unwrap_err();
        assert!(err.to_string().starts_with("helm.fileParameters[0].path"), "{err}");
        let mut a = args();
        a.file_parameters = vec![("f".into(), "/c/a\\,b".into())];
        assert!(helm_template(&options, &a, "app", "ns").is_err());
        let mut a = args();
        a.chart_dir = "chart".into();
        assert!(
            helm_template(&options, &a, "app", "ns").is_err(),
            "a relative chart directory"
        );
    }
}
