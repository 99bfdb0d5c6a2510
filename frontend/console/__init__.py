"""The department admin console (mounted at /console/ by frontend.urls, routes in frontend.urls_console).

Dept admins see the departments they administer, platform admins all of them; a department the user
is not in answers 404, one they are only a member of 403. Views stay thin: look up, check, call one
service or selector, render. Services raise InvalidInput, shown beside the fields it names.

One module a section: overview (the console's index), members (members and roles), quotas (with the
what-if preview), loans (quota loans to and from other departments), priorities (priority classes), storage,
usage (the usage report) and audit (the audit log); access holds the checks they share. The webhooks pages
are webhooks.views.
"""
