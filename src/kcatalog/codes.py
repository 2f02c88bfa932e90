"""The stable diagnostic codes, grouped by the stage that finds them."""

from __future__ import annotations

# KC0xx: reading YAML.  KC1xx: schema.  KC2xx: linking files together.
# KC3xx: import targets.  KC4xx: catalog policy.  KC5xx: an application's `require=`.
# KC6xx: backend overrides (`overrides=`, KCATALOG_OVERRIDES, KCATALOG_BACKEND).
CODES: dict[str, str] = {
    "KC001": "YAML syntax error",
    "KC002": "duplicate mapping key",
    "KC003": "unsupported YAML: tags other than plain YAML, merge keys, multiple documents",
    "KC004": "file refused: too large, nested too deep, or too many aliased nodes",
    "KC005": "file cannot be read or decoded as UTF-8",
    "KC006": "path not found, or no catalog files in it",
    "KC101": "unknown field",
    "KC102": "missing required field",
    "KC103": "invalid value or wrong type",
    "KC104": "unsupported format version",
    "KC201": "op declared more than once",
    "KC202": "backend declared more than once for one op",
    "KC203": "unknown backend name",
    "KC204": "reference backend is not a backend of the op",
    "KC205": "extension of an op that no manifest declares",
    "KC206": "catalog settings file (kcatalog.yaml) missing or duplicated",
    "KC207": "backend dtypes or tolerances name a dtype the op does not declare",
    "KC208": "argument named by mutates or dispatch_arg is not in the signature",
    "KC209": "samples: arguments do not match the signature",
    "KC210": "samples: unknown size name or malformed size expression",
    "KC211": "samples: compare names no output of the op",
    "KC301": "target module not found",
    "KC302": "target attribute not defined by its module",
    "KC303": "target unavailable here: its top-level package is not installed",
    "KC304": "target not verifiable statically",
    "KC305": "target outside the allowed modules",
    "KC306": "target module has a syntax error",
    "KC307": "target failed to import (validate --import)",
    "KC308": "target is not callable (validate --import)",
    "KC309": "target's parameters differ from the op's signature (validate --import)",
    "KC401": "op lacks a backend the policy requires",
    "KC402": "op has no backend eligible on a platform the policy requires",
    "KC501": "required op not in the catalog",
    "KC502": "required backend missing for an op",
    "KC601": "override names an unknown backend",
    "KC602": "override pattern matches no op",
    "KC603": "override text malformed",
}
