"""The stable diagnostic codes as named constants, grouped by the stage that finds them, with their meanings."""

from __future__ import annotations

from typing import Final

# KC0xx read: finding files and parsing YAML.
YAML_SYNTAX: Final = "KC001"
DUPLICATE_KEY: Final = "KC002"
UNSUPPORTED_YAML: Final = "KC003"
FILE_REFUSED: Final = "KC004"
FILE_UNREADABLE: Final = "KC005"
PATH_NOT_FOUND: Final = "KC006"
PLUGIN_BROKEN: Final = "KC007"
# KC1xx validate: the schema.
UNKNOWN_FIELD: Final = "KC101"
MISSING_FIELD: Final = "KC102"
INVALID_VALUE: Final = "KC103"
UNSUPPORTED_VERSION: Final = "KC104"
# KC2xx link: files together.
DUPLICATE_OP: Final = "KC201"
DUPLICATE_BACKEND: Final = "KC202"
UNKNOWN_BACKEND: Final = "KC203"
REFERENCE_NOT_A_BACKEND: Final = "KC204"
EXTENDS_UNKNOWN_OP: Final = "KC205"
SETTINGS_FILE: Final = "KC206"
DTYPE_NOT_OF_OP: Final = "KC207"
ARGUMENT_NOT_IN_SIGNATURE: Final = "KC208"
SAMPLE_ARGUMENTS: Final = "KC209"
SAMPLE_SIZE: Final = "KC210"
SAMPLE_COMPARE: Final = "KC211"
TORCH_SCHEMA_UNSUPPORTED: Final = "KC212"
TORCH_FAKE_MISSING: Final = "KC213"
TORCH_NAME_COLLISION: Final = "KC214"
UNKNOWN_DEVICE: Final = "KC215"
UNKNOWN_PRIORITY_LIST: Final = "KC216"
DUPLICATE_LAYER_MAPPING: Final = "KC217"
LAYER_OP_UNKNOWN: Final = "KC218"
UNORDERED_BACKENDS: Final = "KC219"
# KC22x link: layers together (read/layer_sources.py, link/merged_settings.py, link/extensions.py).
BACKEND_REDECLARED: Final = "KC220"
LAYER_PRIORITY_CONFLICT: Final = "KC221"
REPLACES_UNKNOWN_BACKEND: Final = "KC222"
# KC23x link: tuned selection tables (catalog files with a top-level `tuned:`).
TUNED_UNKNOWN_OP: Final = "KC230"
TUNED_UNKNOWN_BACKEND: Final = "KC231"
TUNED_NOT_ELIGIBLE: Final = "KC232"
TUNED_BUCKETS: Final = "KC233"
TUNED_PLATFORM_MISMATCH: Final = "KC234"
TUNED_STALE: Final = "KC235"
TABLE_KEY: Final = "KC236"
TUNED_KEY: Final = "KC237"
# KC24x check: a plan given to load_catalog(plan=...).
PLAN_UNKNOWN_OP: Final = "KC240"
PLAN_UNKNOWN_BACKEND: Final = "KC241"
PLAN_DIGEST_DIFFERS: Final = "KC242"
PLAN_BUCKETS: Final = "KC243"
PLAN_KEY: Final = "KC244"
# KC25x link: backward ops, an op's `backward:` against the op it names (link/backward.py), and the layer mappings
# declared for training, whose ops must have one (link/layer_mappings.py).
BACKWARD_UNKNOWN_OP: Final = "KC250"
BACKWARD_SIGNATURE: Final = "KC251"
BACKWARD_GRADS: Final = "KC252"
BACKWARD_SAVES: Final = "KC253"
BACKWARD_OF_MUTATING: Final = "KC254"
BACKWARD_UNCOVERED: Final = "KC255"
LAYER_OP_NO_BACKWARD: Final = "KC256"
# KC3xx check: import targets.
TARGET_MODULE_NOT_FOUND: Final = "KC301"
TARGET_ATTRIBUTE_MISSING: Final = "KC302"
TARGET_UNAVAILABLE: Final = "KC303"
TARGET_UNVERIFIABLE: Final = "KC304"
TARGET_NOT_ALLOWED: Final = "KC305"
TARGET_SYNTAX_ERROR: Final = "KC306"
TARGET_IMPORT_FAILED: Final = "KC307"
TARGET_NOT_CALLABLE: Final = "KC308"
TARGET_SIGNATURE_MISMATCH: Final = "KC309"
LAYER_CLASS_NOT_A_CLASS: Final = "KC310"
# KC4xx link: the layers' policies (link/policy.py says which ops each governs).
POLICY_BACKEND_MISSING: Final = "KC401"
POLICY_PLATFORM_UNSERVED: Final = "KC402"
POLICY_REFERENCE_MISSING: Final = "KC403"
# KC5xx check: an application's `require=`.
REQUIRED_OP_MISSING: Final = "KC501"
REQUIRED_BACKEND_MISSING: Final = "KC502"
# KC6xx check: backend overrides (`overrides=`, KCATALOG_OVERRIDES, KCATALOG_BACKEND) and required promises
# (KCATALOG_DETERMINISTIC).
OVERRIDE_UNKNOWN_BACKEND: Final = "KC601"
OVERRIDE_MATCHES_NOTHING: Final = "KC602"
OVERRIDE_MALFORMED: Final = "KC603"
DETERMINISTIC_MALFORMED: Final = "KC604"
# KC7xx migrate: `kcatalog import-registry`, what a Python registry holds that the catalog cannot express.
REGISTRY_SPEC_INCOMPLETE: Final = "KC701"
REGISTRY_NAME_UNSUPPORTED: Final = "KC702"
REGISTRY_TARGET_MALFORMED: Final = "KC703"
REGISTRY_DUPLICATE_SPEC: Final = "KC704"
REGISTRY_CAPABILITY_UNMAPPED: Final = "KC705"
REGISTRY_DEVICE_DECLARED: Final = "KC706"
REGISTRY_ATTRIBUTE_NOT_IMPORTED: Final = "KC707"
REGISTRY_PRIORITY_UNMAPPED: Final = "KC708"
REGISTRY_ORDER_MISSING: Final = "KC709"

# Target problems that are warnings: the target may well work where its package is installed.
TARGET_WARNINGS: Final = frozenset({TARGET_UNAVAILABLE, TARGET_UNVERIFIABLE})

CODES: Final[dict[str, str]] = {
    YAML_SYNTAX: "YAML syntax error",
    DUPLICATE_KEY: "duplicate mapping key",
    UNSUPPORTED_YAML: "unsupported YAML: tags other than plain YAML, merge keys, multiple documents",
    FILE_REFUSED: "file refused: too large, nested too deep, too many aliased nodes, or writable by every user",
    FILE_UNREADABLE: "file cannot be read or decoded as UTF-8",
    PATH_NOT_FOUND: "path not found, or no catalog files in it",
    PLUGIN_BROKEN: "an installed plugin's catalog has errors: the distribution to fix, uninstall or leave out",
    UNKNOWN_FIELD: "unknown field",
    MISSING_FIELD: "missing required field",
    INVALID_VALUE: "invalid value or wrong type",
    UNSUPPORTED_VERSION: "unsupported format version",
    DUPLICATE_OP: "op declared more than once",
    DUPLICATE_BACKEND: "backend declared more than once for one op",
    UNKNOWN_BACKEND: "unknown backend name",
    REFERENCE_NOT_A_BACKEND: "reference backend is not a backend of the op",
    EXTENDS_UNKNOWN_OP: "extension of an op that no manifest declares",
    SETTINGS_FILE: "catalog settings file (kcatalog.yaml) missing or duplicated",
    DTYPE_NOT_OF_OP: "backend dtypes or tolerances name a dtype the op does not declare",
    ARGUMENT_NOT_IN_SIGNATURE: "argument named by mutates or dispatch_arg is not in the signature",
    SAMPLE_ARGUMENTS: "samples: arguments do not match the signature",
    SAMPLE_SIZE: "samples: unknown size name or malformed size expression",
    SAMPLE_COMPARE: "samples: compare names no output of the op",
    TORCH_SCHEMA_UNSUPPORTED: "signature torch.library cannot express as a torch op schema",
    TORCH_FAKE_MISSING: "op returns something but declares no fake implementation for torch.compile",
    TORCH_NAME_COLLISION: "two ops map to one torch op name",
    UNKNOWN_DEVICE: "device kind neither built in nor declared in the settings' devices",
    UNKNOWN_PRIORITY_LIST: "op names a priority list the settings do not declare",
    DUPLICATE_LAYER_MAPPING: "layer mapping declared more than once",
    LAYER_OP_UNKNOWN: "layer mapping names an op the catalog does not declare",
    UNORDERED_BACKENDS: "op of several backends that no priority ranks: declaration order decides (a warning)",
    BACKEND_REDECLARED: "backend declared by the settings of two layers",
    LAYER_PRIORITY_CONFLICT: "a layer's priority list reorders backends an earlier layer ranked",
    REPLACES_UNKNOWN_BACKEND: "an extension replaces a backend the op does not have",
    TUNED_UNKNOWN_OP: "tuned table names an op the catalog does not declare",
    TUNED_UNKNOWN_BACKEND: "tuned table names a backend the op does not have",
    TUNED_NOT_ELIGIBLE: "tuned table chooses a backend that cannot run on the table's platform or dtype",
    TUNED_BUCKETS: "tuned table buckets unsorted, overlapping, empty, or tuned twice",
    TUNED_PLATFORM_MISMATCH: "tuned table measured on another platform than the one it claims",
    TUNED_STALE: "tuned entry stale: a timed backend's kernel source changed since it was measured (an error with "
    "tuned: {stale: error})",
    TABLE_KEY: "op's table_key names a size that is no dimension of its samples' tensor arguments (or the token count)",
    TUNED_KEY: "tuned entry's key does not give the sizes its op's table_key names (or the op declares none)",
    PLAN_UNKNOWN_OP: "plan pins an op the catalog does not declare",
    PLAN_UNKNOWN_BACKEND: "plan pins a backend the op does not have",
    PLAN_DIGEST_DIFFERS: "plan was made from a catalog with other contents (a warning; an error with strict)",
    PLAN_BUCKETS: "a plan entry's buckets are unsorted or overlap",
    PLAN_KEY: "plan entry's key does not give the sizes its op's table_key names (or the op declares none)",
    BACKWARD_UNKNOWN_OP: "an op's backward names an op the catalog does not declare",
    BACKWARD_SIGNATURE: "backward op's signature does not follow the convention: one gradient per differentiable "
    "output, the forward op's parameters (those `inputs` names), the `outputs` and `saves` outputs; returns one "
    "gradient per `grads` entry",
    BACKWARD_GRADS: "backward's grads or inputs name a parameter the forward op lacks (or twice), or grads one that "
    "is not a Tensor",
    BACKWARD_SAVES: "backward's saves or outputs name no output of the forward op, one that is not a Tensor, or one "
    "twice",
    BACKWARD_OF_MUTATING: "an op that mutates its arguments declares a backward",
    BACKWARD_UNCOVERED: "a backend of the forward op runs where (or on a dtype) no backend of its backward op does",
    LAYER_OP_NO_BACKWARD: "a layer mapping declared for training names an op that declares no backward",
    TARGET_MODULE_NOT_FOUND: "target module not found",
    TARGET_ATTRIBUTE_MISSING: "target attribute not defined by its module",
    TARGET_UNAVAILABLE: "target unavailable here: its top-level package is not installed",
    TARGET_UNVERIFIABLE: "target not verifiable statically",
    TARGET_NOT_ALLOWED: "target outside the allowed modules",
    TARGET_SYNTAX_ERROR: "target module has a syntax error",
    TARGET_IMPORT_FAILED: "target failed to import (validate --import)",
    TARGET_NOT_CALLABLE: "target is not callable (validate --import)",
    TARGET_SIGNATURE_MISMATCH: "target's parameters differ from the op's signature (validate --import)",
    LAYER_CLASS_NOT_A_CLASS: "a layer mapping names a function or module where a class is expected",
    POLICY_BACKEND_MISSING: "op lacks a backend that a layer's policy or require_of_all requires of it",
    POLICY_PLATFORM_UNSERVED: "op has no eligible backend on a platform a layer's policy or require_of_all requires",
    POLICY_REFERENCE_MISSING: "op names no reference backend, which a layer's policy or require_of_all requires",
    REQUIRED_OP_MISSING: "required op not in the catalog",
    REQUIRED_BACKEND_MISSING: "required backend missing for an op",
    OVERRIDE_UNKNOWN_BACKEND: "override names an unknown backend",
    OVERRIDE_MATCHES_NOTHING: "override pattern matches no op",
    OVERRIDE_MALFORMED: "override text malformed",
    DETERMINISTIC_MALFORMED: "KCATALOG_DETERMINISTIC names no promise",
    REGISTRY_SPEC_INCOMPLETE: "registry spec lacks op, backend or target, or has them of the wrong type",
    REGISTRY_NAME_UNSUPPORTED: "registry op id or backend name the catalog format cannot express, or a group no "
    "manifest can be named after (the settings file's name, too long a file name)",
    REGISTRY_TARGET_MALFORMED: "registry target is not 'package.module:attr'",
    REGISTRY_DUPLICATE_SPEC: "registry holds two specs for one op and backend",
    REGISTRY_CAPABILITY_UNMAPPED: "registry capability with a field or value the catalog cannot express",
    REGISTRY_DEVICE_DECLARED: "registry device kind not built in: declared in the imported settings",
    REGISTRY_ATTRIBUTE_NOT_IMPORTED: "registry spec attribute the importer does not read",
    REGISTRY_PRIORITY_UNMAPPED: "registry priority malformed, conflicting, or naming an unusable backend",
    REGISTRY_ORDER_MISSING: "registry gives no order for an op of several backends: declaration order decides",
}
