#!/usr/bin/env python3
"""Generate e2e/devcluster/src/protobuf/tables.rs, the field tables of the protobuf request decoder.

kube-apiserver decodes a protobuf body into the Go struct of its kind, so the faithful table for every kind is
that struct: its `protobuf:"...,N,..."` struct tags give the field numbers, its `json:"..."` tags the JSON
names (`,inline` for embedded structs, `,omitempty` for zero values Go's JSON encoder leaves out), and a
pointer type says that presence matters (`replicas: 0` is not an absent `replicas`). The generator reads the
`types*.go` files of k8s.io/api, k8s.io/apimachinery and k8s.io/apiextensions-apiserver at the Kubernetes
release devcluster reports (1.32) and writes one static table per struct reachable from the root kinds below.

Usage (each argument a checkout of that module at v0.32.x):
    gen-protobuf-tables.py API_DIR APIMACHINERY_DIR APIEXTENSIONS_DIR > e2e/devcluster/src/protobuf/tables.rs
"""

from __future__ import annotations

import os
import re
import sys

# (apiVersion, import path, Go type). "*" as apiVersion: accepted under every apiVersion (DeleteOptions is
# registered in every group version, client-go sends the version of the client that issues the DELETE).
ROOTS = [
    ("*", "k8s.io/apimachinery/pkg/apis/meta/v1", "DeleteOptions"),
] + [
    ("v1", "k8s.io/api/core/v1", k)
    for k in ["Namespace", "ConfigMap", "Secret", "Service", "ServiceAccount", "Pod", "Event", "Endpoints",
              "PersistentVolumeClaim", "LimitRange", "ResourceQuota", "Binding"]
] + [
    ("apps/v1", "k8s.io/api/apps/v1", k) for k in ["Deployment", "StatefulSet", "DaemonSet", "ReplicaSet"]
] + [
    ("batch/v1", "k8s.io/api/batch/v1", k) for k in ["Job", "CronJob"]
] + [
    ("autoscaling/v1", "k8s.io/api/autoscaling/v1", "Scale"),
    ("autoscaling/v2", "k8s.io/api/autoscaling/v2", "HorizontalPodAutoscaler"),
    ("events.k8s.io/v1", "k8s.io/api/events/v1", "Event"),
    ("networking.k8s.io/v1", "k8s.io/api/networking/v1", "Ingress"),
    ("networking.k8s.io/v1", "k8s.io/api/networking/v1", "NetworkPolicy"),
    ("policy/v1", "k8s.io/api/policy/v1", "PodDisruptionBudget"),
    ("coordination.k8s.io/v1", "k8s.io/api/coordination/v1", "Lease"),
    ("apiextensions.k8s.io/v1", "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1",
     "CustomResourceDefinition"),
] + [
    ("rbac.authorization.k8s.io/v1", "k8s.io/api/rbac/v1", k)
    for k in ["Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"]
] + [
    ("authorization.k8s.io/v1", "k8s.io/api/authorization/v1", k)
    for k in ["SelfSubjectAccessReview", "SelfSubjectRulesReview", "SubjectAccessReview",
              "LocalSubjectAccessReview"]
] + [
    ("authentication.k8s.io/v1", "k8s.io/api/authentication/v1", k)
    for k in ["TokenRequest", "TokenReview", "SelfSubjectReview"]
]

# Go types whose JSON form is not their struct's: the decoder has a dedicated `Ty` for each.
SPECIAL = {
    ("k8s.io/apimachinery/pkg/apis/meta/v1", "Time"): "Ty::Time",
    ("k8s.io/apimachinery/pkg/apis/meta/v1", "MicroTime"): "Ty::MicroTime",
    ("k8s.io/apimachinery/pkg/apis/meta/v1", "FieldsV1"): "Ty::RawJson",
    ("k8s.io/apimachinery/pkg/runtime", "RawExtension"): "Ty::RawJson",
    ("k8s.io/apimachinery/pkg/api/resource", "Quantity"): "Ty::Quantity",
    ("k8s.io/apimachinery/pkg/util/intstr", "IntOrString"): "Ty::IntOrString",
    ("k8s.io/apimachinery/pkg/types", "UID"): "Ty::Str",
    ("k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1", "JSON"): "Ty::RawJson",
    ("k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1", "JSONSchemaPropsOrArray"): "Ty::SchemaOrArray",
    ("k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1", "JSONSchemaPropsOrBool"): "Ty::SchemaOrBool",
    ("k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1",
     "JSONSchemaPropsOrStringArray"): "Ty::SchemaOrStringArray",
    ("k8s.io/api/authorization/v1", "ExtraValue"): "Ty::StrList",
    ("k8s.io/api/authentication/v1", "ExtraValue"): "Ty::StrList",
}
# The special `Ty`s that hold JSONSchemaProps need its table.
SCHEMA_PROPS = ("k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1", "JSONSchemaProps")

# Fields the server must not take from a client: ObjectMeta.selfLink is never echoed by kube-apiserver.
SKIP = {("k8s.io/apimachinery/pkg/apis/meta/v1", "ObjectMeta", "selfLink")}

SCALARS = {
    "string": "Ty::Str", "bool": "Ty::Bool", "float64": "Ty::Double", "float32": "Ty::Double",
    "int": "Ty::Int", "int32": "Ty::Int", "int64": "Ty::Int", "uint32": "Ty::Int", "uint64": "Ty::Int",
    "uint16": "Ty::Int", "int16": "Ty::Int", "byte": "Ty::Int",
}

STRUCT_RE = re.compile(r"^type (\w+) struct \{\n(.*?)^\}", re.S | re.M)
EMPTY_STRUCT_RE = re.compile(r"^type (\w+) struct ?\{\}", re.M)
ALIAS_RE = re.compile(r"^type (\w+) (?!struct)([^\s=][^\n]*?)\s*(?://.*)?$", re.M)
FIELD_RE = re.compile(r"^\s*(?:(\w+)\s+)?([\w.\[\]*]+(?:\[[\w.]+\][\w.*\[\]]+)?)\s+`([^`]*)`")


def package_dirs(api: str, machinery: str, ext: str) -> dict[str, str]:
    out = {}
    for group in ["core/v1", "apps/v1", "batch/v1", "autoscaling/v1", "autoscaling/v2", "events/v1",
                  "networking/v1", "policy/v1", "rbac/v1", "coordination/v1", "authorization/v1",
                  "authentication/v1"]:
        out[f"k8s.io/api/{group}"] = os.path.join(api, group)
    out["k8s.io/apimachinery/pkg/apis/meta/v1"] = os.path.join(machinery, "pkg/apis/meta/v1")
    out["k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"] = os.path.join(
        ext, "pkg/apis/apiextensions/v1")
    return out


class Package:
    def __init__(self, path: str, directory: str):
        self.path = path
        self.structs: dict[str, list[tuple[str, str, str, dict[str, str]]]] = {}
        self.aliases: dict[str, tuple[str, dict[str, str]]] = {}
        for name in sorted(os.listdir(directory)):
            if not name.endswith(".go") or name.endswith("_test.go") or name.startswith(("zz_", "generated")):
                continue
            with open(os.path.join(directory, name), encoding="utf-8") as handle:
                self.parse(handle.read())

    def parse(self, src: str) -> None:
        imports = {}
        for alias, path in re.findall(r'^\s*(\w+)?\s*"(k8s\.io/[^"]+)"', src, re.M):
            imports[alias or path.rsplit("/", 1)[-1]] = path
        for name in EMPTY_STRUCT_RE.findall(src):
            self.structs[name] = []
        for name, body in STRUCT_RE.findall(src):
            fields = []
            for line in body.splitlines():
                m = FIELD_RE.match(line)
                if m:
                    fields.append((m.group(1) or "", m.group(2), m.group(3), imports))
            self.structs[name] = fields
        for name, target in ALIAS_RE.findall(src):
            if not target.startswith(("interface", "func", "(")):
                self.aliases[name] = (target.strip(), imports)


def tag(tags: str, key: str) -> str | None:
    m = re.search(rf'{key}:"([^"]*)"', tags)
    return m.group(1) if m else None


def rust_name(pkg: str, name: str) -> str:
    short = pkg.replace("k8s.io/apimachinery/pkg/apis/meta/", "meta_").replace("k8s.io/api/", "")
    short = short.replace("k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/", "apiextensions_")
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name)
    return re.sub(r"[^A-Za-z0-9]", "_", f"{short}_{snake}").upper()


class Generator:
    def __init__(self, packages: dict[str, Package]):
        self.packages = packages
        self.emitted: dict[tuple[str, str], str] = {}
        self.queue: list[tuple[str, str]] = []
        self.out: list[str] = []

    def message(self, pkg: str, name: str) -> str:
        key = (pkg, name)
        if key not in self.emitted:
            self.emitted[key] = rust_name(pkg, name)
            self.queue.append(key)
        return self.emitted[key]

    def resolve(self, pkg: str, gotype: str, imports: dict[str, str]) -> tuple[str, bool]:
        """(Ty expression, is repeated) of a Go type; pointers are stripped by the caller."""
        if gotype == "[]byte":
            return "Ty::Bytes", False
        if gotype.startswith("[]"):
            inner, _ = self.resolve(pkg, gotype[2:].lstrip("*"), imports)
            return inner, True
        if gotype.startswith("map["):
            value = gotype[gotype.index("]") + 1:].lstrip("*")
            inner, repeated = self.resolve(pkg, value, imports)
            if repeated:
                raise ValueError(f"map of lists {gotype} in {pkg}")
            return f"Ty::Map(&{inner})", False
        if "." in gotype:
            alias, name = gotype.split(".", 1)
            pkg = imports.get(alias, alias)
        else:
            name = gotype
        if name in SCALARS and "." not in gotype:
            return SCALARS[name], False
        if (pkg, name) in SPECIAL:
            if (pkg, name)[1].startswith("JSONSchemaPropsOr"):
                self.message(*SCHEMA_PROPS)
            return SPECIAL[(pkg, name)], False
        package = self.packages.get(pkg)
        if package is None:
            raise ValueError(f"type {gotype} from unknown package {pkg}")
        if name in package.structs:
            return f"Ty::Msg(&{self.message(pkg, name)})", False
        if name in package.aliases:
            target, imports = package.aliases[name]
            return self.resolve(pkg, target, imports)
        raise ValueError(f"unknown type {pkg}.{name}")

    def field(self, pkg: str, struct: str, field: tuple[str, str, str, dict[str, str]]) -> str | None:
        go_name, gotype, tags, imports = field
        proto = tag(tags, "protobuf")
        json_tag = tag(tags, "json")
        if proto is None or json_tag is None or json_tag == "-":
            return None
        number = int(proto.split(",")[1])
        json_name, *options = json_tag.split(",")
        if (pkg, struct, json_name) in SKIP:
            return None
        pointer = gotype.startswith("*")
        ty, repeated = self.resolve(pkg, gotype.lstrip("*"), imports)
        inline = "inline" in options or (not go_name and not json_name)
        if inline:
            if not ty.startswith("Ty::Msg("):
                raise ValueError(f"inline non-struct {struct}.{gotype}")
            ty, json_name = "Ty::Inline(" + ty[len("Ty::Msg("):], ""
        if repeated:
            flag = "REP"
        elif pointer:
            flag = "PTR"
        elif "omitempty" in options or inline:
            flag = "OPT"
        else:
            flag = "REQ"
        return f"    F::new({number}, {json_name!r}, {ty}, {flag}),".replace("'", '"')

    def run(self) -> str:
        roots = []
        for api_version, pkg, kind in ROOTS:
            roots.append((api_version, kind, self.message(pkg, kind)))
        while self.queue:
            pkg, name = self.queue.pop(0)
            struct = self.packages[pkg].structs[name]
            lines = [line for f in struct if (line := self.field(pkg, name, f))]
            self.out.append(f"pub static {self.emitted[(pkg, name)]}: Table = &[\n" + "\n".join(lines) + "\n];")
        head = [
            "// @generated by e2e/devcluster/tools/gen-protobuf-tables.py from the Go types of k8s.io/api,",
            "// k8s.io/apimachinery and k8s.io/apiextensions-apiserver v0.32; do not edit by hand.",
            "//! The protobuf field tables of every kind devcluster accepts in protobuf, one per Go struct.",
            "",
            "#![allow(clippy::all)]",
            "",
            "use super::{Table, F, OPT, PTR, REP, REQ};",
            "use super::Ty;",
            "",
            "/// The root kinds: (apiVersion, kind, table); apiVersion \"*\" matches every apiVersion.",
            "pub static ROOTS: &[(&str, &str, &Table)] = &[",
        ]
        head += [f'    ("{v}", "{k}", &{t}),' for v, k, t in roots]
        head.append("];")
        return "\n".join(head + [""] + self.out) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        sys.stderr.write(__doc__)
        return 2
    dirs = package_dirs(*argv)
    packages = {path: Package(path, directory) for path, directory in dirs.items()}
    sys.stdout.write(Generator(packages).run())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
