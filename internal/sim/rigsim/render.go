package rigsim

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/jpeg"
	"strings"

	xdraw "golang.org/x/image/draw"
	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"

	"github.com/clawfarm/clawfarm/internal/sim/rigsim/phone"
)

// The rendered frame. Its longest edge stays under the contract's 1566 px.
const (
	frameWidth  = 480
	frameHeight = 1040
	jpegQuality = 80
	maxLongEdge = 1566 // docs/rig-contract.md: a JPEG's longest edge is at most 1566 px
	glyphWidth  = 7    // basicfont.Face7x13
	glyphHeight = 13
	glyphAscent = 11
	glareAlpha  = 170 // how much the glare patch washes out
)

// fontFallback stands in for characters the bitmap font lacks.
var fontFallback = strings.NewReplacer("¥", "Y", "…", "...", "—", "-")

var palette = map[string]color.RGBA{
	"":       {20, 20, 20, 255},
	"black":  {20, 20, 20, 255},
	"white":  {250, 250, 250, 255},
	"grey":   {142, 142, 147, 255},
	"blue":   {0, 122, 255, 255},
	"green":  {52, 199, 89, 255},
	"red":    {255, 59, 48, 255},
	"orange": {255, 149, 0, 255},
	"yellow": {255, 204, 0, 255},
	"teal":   {48, 176, 199, 255},
}

var (
	background = color.RGBA{242, 242, 247, 255}
	lockTint   = color.RGBA{28, 40, 70, 255}
	boxOutline = color.RGBA{230, 40, 40, 255}
)

// frame is what the rig draws: the phone's elements plus the AssistiveTouch button.
type frame struct {
	elements       []phone.Element
	assistiveTouch phone.Box
	locked         bool
	glare          bool
}

// renderJPEG draws a frame and encodes it.
func renderJPEG(f frame) ([]byte, error) {
	img := image.NewRGBA(image.Rect(0, 0, frameWidth, frameHeight))
	bg := background
	if f.locked {
		bg = lockTint
	}
	draw.Draw(img, img.Bounds(), &image.Uniform{bg}, image.Point{}, draw.Src)
	for _, e := range f.elements {
		drawElement(img, e, f.locked)
	}
	drawAssistiveTouch(img, f.assistiveTouch)
	if f.glare {
		r := image.Rect(frameWidth/3, frameHeight/5, frameWidth, frameHeight/2)
		draw.DrawMask(img, r, image.White, image.Point{}, &image.Uniform{color.Alpha{glareAlpha}}, image.Point{}, draw.Over)
	}
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, img, &jpeg.Options{Quality: jpegQuality}); err != nil {
		return nil, fmt.Errorf("encode the screen as JPEG: %w", err)
	}
	return buf.Bytes(), nil
}

func pixelRect(b phone.Box) image.Rectangle {
	return image.Rect(int(b.L*frameWidth), int(b.T*frameHeight), int(b.R*frameWidth), int(b.B*frameHeight))
}

func drawElement(img *image.RGBA, e phone.Element, onDark bool) {
	r := pixelRect(e.Box)
	c := palette[e.Style.Color]
	if e.Kind == phone.Icon {
		draw.Draw(img, r, &image.Uniform{c}, image.Point{}, draw.Src)
		outline(img, r.Inset(-2), boxOutline)
		return
	}
	textColor := c
	if e.Style.Filled {
		draw.Draw(img, r.Inset(-4), &image.Uniform{c}, image.Point{}, draw.Src)
		textColor = palette["white"]
		if e.Style.Color == "white" || e.Style.Color == "yellow" {
			textColor = palette["black"]
		}
	} else if onDark {
		textColor = palette["white"]
	}
	drawText(img, e.Label, r.Min, e.Style.Scale, textColor)
}

// drawText writes s at top-left pt, scaled up by an integer factor from the 7×13 bitmap font.
func drawText(img *image.RGBA, s string, pt image.Point, scale int, c color.RGBA) {
	if scale <= 0 {
		scale = 2
	}
	s = fontFallback.Replace(s)
	n := len([]rune(s))
	if n == 0 {
		return
	}
	small := image.NewRGBA(image.Rect(0, 0, n*glyphWidth, glyphHeight))
	d := font.Drawer{Dst: small, Src: &image.Uniform{c}, Face: basicfont.Face7x13, Dot: fixed.P(0, glyphAscent)}
	d.DrawString(s)
	dst := image.Rect(pt.X, pt.Y, pt.X+n*glyphWidth*scale, pt.Y+glyphHeight*scale)
	xdraw.NearestNeighbor.Scale(img, dst, small, small.Bounds(), draw.Over, nil)
}

func outline(img *image.RGBA, r image.Rectangle, c color.RGBA) {
	for x := r.Min.X; x < r.Max.X; x++ {
		img.SetRGBA(x, r.Min.Y, c)
		img.SetRGBA(x, r.Max.Y-1, c)
	}
	for y := r.Min.Y; y < r.Max.Y; y++ {
		img.SetRGBA(r.Min.X, y, c)
		img.SetRGBA(r.Max.X-1, y, c)
	}
}

func drawAssistiveTouch(img *image.RGBA, at phone.Box) {
	r := pixelRect(at)
	cx, cy, rad := (r.Min.X+r.Max.X)/2, (r.Min.Y+r.Max.Y)/2, min(r.Dx(), r.Dy())/2
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			if dx, dy := x-cx, y-cy; dx*dx+dy*dy <= rad*rad {
				img.SetRGBA(x, y, color.RGBA{90, 90, 90, 255})
			}
		}
	}
}
