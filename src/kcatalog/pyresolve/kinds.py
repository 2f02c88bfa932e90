"""What a located module is (a ModuleLocation's `kind`), as named constants: `kinds.SOURCE`, `kinds.NAMESPACE` ..."""

SOURCE = "source"  # Python source: a module file or a regular package's __init__.py
NAMESPACE = "namespace"  # a PEP 420 namespace package: only submodules
EXTENSION = "extension"  # a compiled extension module (.so, .pyd)
BYTECODE = "bytecode"  # a sourceless .pyc
BUILTIN = "built-in"
FROZEN = "frozen"  # frozen into the interpreter; read from its source file where that is known
HOOKED = "hooked"  # provided by a third-party import hook: nothing to read
RUNTIME = "run time"  # only in sys.modules (a proxy object, or a module made at run time): nothing to read
