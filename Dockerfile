# One image for every tickwork process; compose.yaml picks the verb with `command:`.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY . .
RUN pip install --no-cache-dir .

# Run as an unprivileged user. The uid is numeric in USER so that
# orchestrators (e.g. Kubernetes runAsNonRoot) can verify it is not root.
RUN useradd --uid 10001 --user-group --create-home --shell /usr/sbin/nologin tickwork
USER 10001:10001
WORKDIR /home/tickwork

EXPOSE 8080
CMD ["tickwork", "api", "--host", "0.0.0.0", "--port", "8080"]
