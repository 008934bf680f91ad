"""Security: TLS contexts, SASL mechanisms, principals, the ACL authorizer and quotas
(issue 17). Nothing here does network I/O: the server wraps these around its connections."""
